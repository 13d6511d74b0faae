package meilitest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/meilisearch/meilisearch-go"

	"github.com/meilistream/meilistream/internal/meilitest"
)

func Example() {
	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key"})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client := meilisearch.New(srv.URL(), meilisearch.WithAPIKey("key"), meilisearch.DisableRetries())
	defer client.Close()
	ctx := context.Background()

	pk := "id"
	info, _ := client.Index("movies").AddDocuments(ctx, []map[string]any{
		{"id": "m1", "title": "Alien"},
		{"id": "bad id!", "title": "Heat"},
	}, &meilisearch.DocumentOptions{PrimaryKey: &pk})
	task, _ := client.WaitForTask(ctx, info.TaskUID, time.Millisecond)
	fmt.Println(task.Status, task.Error.Code)

	_ = srv.WaitIdle(ctx)
	// The failed first write created no index, and wrote nothing.
	fmt.Println(srv.Documents("movies") == nil, srv.Requests("POST /indexes/{uid}/documents"))
	// Output:
	// failed invalid_document_id
	// true 1
}
