package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/config"
)

const (
	testURI    = "mongodb://app:s3cr3t-pw@db1:27017,db2:27017/shop?replicaSet=rs0"
	testAPIKey = "masterKey-abcdef123456"
)

func TestLoad(t *testing.T) {
	base := []string{"MEILISTREAM_MONGODB_URI=" + testURI}
	withBase := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	want := func(edit func(c *config.Config)) config.Config {
		c := config.Default()
		c.MongoDBURI = testURI
		c.MongoDBDatabase = "shop"
		c.ReplicaDatabase = "shop"
		if edit != nil {
			edit(&c)
		}
		return c
	}

	tests := []struct {
		name    string
		environ []string
		want    config.Config
		// problems: each must appear in the error; nil means no error.
		problems []string
	}{
		{
			name:    "only the URI gives every default and the URI's database",
			environ: base,
			want:    want(nil),
		},
		{
			name: "every variable is read",
			environ: withBase(
				"MEILISTREAM_MONGODB_DATABASE=other",
				"MEILISTREAM_MEILI_URL=http://meili:7700",
				"MEILISTREAM_MEILI_API_KEY="+testAPIKey,
				"MEILISTREAM_REPLICA_URI=mongodb://replica/copy",
				"MEILISTREAM_TRANSFORMS=/t",
				"MEILISTREAM_STATE_COLLECTION=ms",
				"MEILISTREAM_INDEX_PREFIX=t1_",
				"MEILISTREAM_LEASE=10s",
				"MEILISTREAM_BATCH_SIZE=50",
				"MEILISTREAM_FLUSH_INTERVAL=250ms",
				"MEILISTREAM_POSITION_INTERVAL=2m",
				"MEILISTREAM_PAGE_SIZE=200",
				"MEILISTREAM_ON_HISTORY_LOST=fail",
				"MEILISTREAM_ON_DOCUMENT_ERROR=fail",
				"MEILISTREAM_TRANSFORM_TIMEOUT=100ms",
				"MEILISTREAM_TRANSFORM_POOL=4",
				"MEILISTREAM_TRANSFORM_MEMORY=256",
				"MEILISTREAM_HTTP_ADDR=127.0.0.1:0",
				"MEILISTREAM_READY_FILE=/run/meilistream/ready",
				"MEILISTREAM_SHUTDOWN_TIMEOUT=5s",
				"MEILISTREAM_LOG_LEVEL=DEBUG",
				"MEILISTREAM_LOG_FORMAT=text",
			),
			want: want(func(c *config.Config) {
				c.MongoDBDatabase = "other"
				c.MeiliURL = "http://meili:7700"
				c.MeiliAPIKey = testAPIKey
				c.ReplicaURI = "mongodb://replica/copy"
				c.ReplicaDatabase = "copy"
				c.Transforms = "/t"
				c.StateCollection = "ms"
				c.IndexPrefix = "t1_"
				c.Lease = 10 * time.Second
				c.BatchSize = 50
				c.FlushInterval = 250 * time.Millisecond
				c.PositionInterval = 2 * time.Minute
				c.PageSize = 200
				c.OnHistoryLost = "fail"
				c.OnDocumentError = "fail"
				c.TransformTimeout = 100 * time.Millisecond
				c.TransformPool = 4
				c.TransformMemory = 256
				c.HTTPAddr = "127.0.0.1:0"
				c.ReadyFile = "/run/meilistream/ready"
				c.ShutdownTimeout = 5 * time.Second
				c.LogLevel = "debug"
				c.LogFormat = "text"
			}),
		},
		{
			name:    "the replica database defaults to the source database when its URI names none",
			environ: withBase("MEILISTREAM_REPLICA_URI=mongodb://replica:27017"),
			want: want(func(c *config.Config) {
				c.ReplicaURI = "mongodb://replica:27017"
			}),
		},
		{
			name:    "an empty value counts as unset",
			environ: withBase("MEILISTREAM_BATCH_SIZE=", "MEILISTREAM_LEASE="),
			want:    want(nil),
		},
		{
			name:    "other programs' variables and the test suite's are ignored",
			environ: withBase("PATH=/bin", "MEILI_MASTER_KEY=x", "MEILISTREAM_TEST_MONGODB_URI=mongodb://x/"),
			want:    want(nil),
		},
		{
			name:    "per-job overrides are filed by job and option, job names may hold underscores",
			environ: withBase("MEILISTREAM_JOB_BLOG_POSTS_PRIMARY_KEY=slug", "MEILISTREAM_JOB_ORDERS_COLLECTION=orders"),
			want: want(func(c *config.Config) {
				c.Jobs = map[string]map[string]string{
					"blog_posts": {"primary_key": "slug"},
					"orders":     {"collection": "orders"},
				}
			}),
		},
		{
			name:     "a missing MongoDB URI is refused",
			environ:  nil,
			problems: []string{"MEILISTREAM_MONGODB_URI: not set"},
		},
		{
			name:     "a URI without a database needs MONGODB_DATABASE",
			environ:  []string{"MEILISTREAM_MONGODB_URI=mongodb://h:27017/?replicaSet=rs0"},
			problems: []string{"MEILISTREAM_MONGODB_DATABASE: not set"},
		},
		{
			name:     "a URI of another scheme is refused without echoing it",
			environ:  []string{"MEILISTREAM_MONGODB_URI=postgres://u:" + "s3cr3t-pw@h/db"},
			problems: []string{"MEILISTREAM_MONGODB_URI: the value does not start with mongodb://"},
		},
		{
			name:     "a URI the driver refuses is refused at start, with the driver's reason",
			environ:  []string{"MEILISTREAM_MONGODB_URI=mongodb://h:99999/shop"},
			problems: []string{"MEILISTREAM_MONGODB_URI: the value is not a valid connection string: ", "port must be in the range [1, 65535]"},
		},
		{
			name:     "a badly escaped password is refused without showing it",
			environ:  []string{"MEILISTREAM_MONGODB_URI=mongodb://app:s3cr3t-pw%zz@h/shop"},
			problems: []string{"MEILISTREAM_MONGODB_URI: the value is not a valid connection string: error parsing uri: invalid password"},
		},
		{
			name:     "a bad replica URI option is refused without showing secret options",
			environ:  withBase("MEILISTREAM_REPLICA_URI=mongodb://r/copy?authMechanism=BOGUS&tlsCertificateKeyFilePassword=s3cr3t-pw"),
			problems: []string{"MEILISTREAM_REPLICA_URI: the value is not a valid connection string"},
		},
		{
			name:     "a batch size that is not a number names the variable",
			environ:  withBase("MEILISTREAM_BATCH_SIZE=abc"),
			problems: []string{`MEILISTREAM_BATCH_SIZE: "abc" is not a whole number; accepts a whole number from 1 to 100000`},
		},
		{
			name:    "numbers are decimal: a leading zero is not octal",
			environ: withBase("MEILISTREAM_BATCH_SIZE=0500", "MEILISTREAM_PAGE_SIZE= 0100"),
			want: want(func(c *config.Config) {
				c.BatchSize = 500
				c.PageSize = 100
			}),
		},
		{
			name:     "a hexadecimal number is refused, naming the variable",
			environ:  withBase("MEILISTREAM_BATCH_SIZE=0x20"),
			problems: []string{`MEILISTREAM_BATCH_SIZE: "0x20" is not a whole number`},
		},
		{
			name:     "a transform memory bound below 0 or above 1 TiB is refused",
			environ:  withBase("MEILISTREAM_TRANSFORM_MEMORY=-1"),
			problems: []string{`MEILISTREAM_TRANSFORM_MEMORY: -1 is out of range`},
		},
		{
			name:    "no transform memory bound",
			environ: withBase("MEILISTREAM_TRANSFORM_MEMORY=0"),
			want:    want(func(c *config.Config) { c.TransformMemory = 0 }),
		},
		{
			name:     "a binary or underscored number is refused",
			environ:  withBase("MEILISTREAM_TRANSFORM_POOL=0b11", "MEILISTREAM_PAGE_SIZE=1_000"),
			problems: []string{`MEILISTREAM_TRANSFORM_POOL: "0b11" is not a whole number`, `MEILISTREAM_PAGE_SIZE: "1_000" is not a whole number`},
		},
		{
			name:     "a Meilisearch URL with a query string is refused without showing it",
			environ:  withBase("MEILISTREAM_MEILI_URL=http://meili:7700/?apiKey=s3cr3t-pw"),
			problems: []string{"MEILISTREAM_MEILI_URL: the value holds a query string or fragment", "MEILISTREAM_MEILI_API_KEY"},
		},
		{
			name:     "a Meilisearch URL with a fragment is refused",
			environ:  withBase("MEILISTREAM_MEILI_URL=http://meili:7700/#s3cr3t-pw"),
			problems: []string{"MEILISTREAM_MEILI_URL: the value holds a query string or fragment"},
		},
		{
			name:     "a negative batch size is out of range",
			environ:  withBase("MEILISTREAM_BATCH_SIZE=-5"),
			problems: []string{"MEILISTREAM_BATCH_SIZE: -5 is out of range"},
		},
		{
			name:     "an unparseable duration names the variable and the syntax",
			environ:  withBase("MEILISTREAM_FLUSH_INTERVAL=1 second"),
			problems: []string{`MEILISTREAM_FLUSH_INTERVAL: "1 second" is not a Go duration; accepts a positive Go duration`},
		},
		{
			name:     "a duration without unit is refused",
			environ:  withBase("MEILISTREAM_LEASE=30"),
			problems: []string{`MEILISTREAM_LEASE: "30" is not a Go duration`},
		},
		{
			name:     "a zero duration is refused",
			environ:  withBase("MEILISTREAM_TRANSFORM_TIMEOUT=0s"),
			problems: []string{"MEILISTREAM_TRANSFORM_TIMEOUT: 0s is not positive"},
		},
		{
			name:     "a transform time limit over a minute is refused",
			environ:  withBase("MEILISTREAM_TRANSFORM_TIMEOUT=90s"),
			problems: []string{"MEILISTREAM_TRANSFORM_TIMEOUT: 1m30s is more than 1m0s"},
		},
		{
			name:    "a removed variable is refused, saying why and what to do",
			environ: withBase("MEILISTREAM_ROLLOUT_GRACE=10m"),
			problems: []string{"MEILISTREAM_ROLLOUT_GRACE: removed: a pod whose transform is older than the recorded one now waits exactly while a live pod runs the newer one, " +
				"and a revert no live pod disagrees with is honoured at once, so there is no grace to set (docs/search-jobs.md, \"Rollouts\"); unset it"},
		},
		{
			name:     "a lease below a second is refused",
			environ:  withBase("MEILISTREAM_LEASE=500ms"),
			problems: []string{"MEILISTREAM_LEASE: 500ms is too short"},
		},
		{
			name:     "a lease over an hour is refused",
			environ:  withBase("MEILISTREAM_LEASE=2h"),
			problems: []string{"MEILISTREAM_LEASE: 2h0m0s is too long; accepts a Go duration from 1s to 1h"},
		},
		{
			name:     "an unknown ON_HISTORY_LOST value lists the choices",
			environ:  withBase("MEILISTREAM_ON_HISTORY_LOST=ignore"),
			problems: []string{`MEILISTREAM_ON_HISTORY_LOST: "ignore" is not a choice; accepts reindex or fail`},
		},
		{
			name:     "an unknown ON_DOCUMENT_ERROR value lists the choices",
			environ:  withBase("MEILISTREAM_ON_DOCUMENT_ERROR=drop"),
			problems: []string{`MEILISTREAM_ON_DOCUMENT_ERROR: "drop" is not a choice; accepts skip or fail`},
		},
		{
			name:     "an invalid log level fails instead of logging everything",
			environ:  withBase("MEILISTREAM_LOG_LEVEL=verbose"),
			problems: []string{`MEILISTREAM_LOG_LEVEL: "verbose" is not a level`},
		},
		{
			name:     "an unknown log format lists the choices",
			environ:  withBase("MEILISTREAM_LOG_FORMAT=logfmt"),
			problems: []string{`MEILISTREAM_LOG_FORMAT: "logfmt" is not a choice; accepts json or text`},
		},
		{
			name:     "a bad listen address is refused",
			environ:  withBase("MEILISTREAM_HTTP_ADDR=8080"),
			problems: []string{`MEILISTREAM_HTTP_ADDR: "8080" is not host:port`},
		},
		{
			name:     "a Meilisearch URL without scheme is refused",
			environ:  withBase("MEILISTREAM_MEILI_URL=meili:7700"),
			problems: []string{`MEILISTREAM_MEILI_URL: "meili:7700" is not an http(s) URL`},
		},
		{
			name:     "an index prefix Meilisearch cannot hold is refused",
			environ:  withBase("MEILISTREAM_INDEX_PREFIX=a.b"),
			problems: []string{`MEILISTREAM_INDEX_PREFIX: "a.b" holds '.'`},
		},
		{
			name:     "an unknown variable is named with the closest known one",
			environ:  withBase("MEILISTREAM_BATCHSIZE=10"),
			problems: []string{"MEILISTREAM_BATCHSIZE: unknown variable (did you mean MEILISTREAM_BATCH_SIZE?)"},
		},
		{
			name:     "a typo in a _FILE variable suggests the _FILE name",
			environ:  withBase("MEILISTREAM_MEILI_API_KEY_FLE=/x"),
			problems: []string{"did you mean MEILISTREAM_MEILI_API_KEY_FILE?"},
		},
		{
			name:     "an unknown per-job option suggests the nearest",
			environ:  withBase("MEILISTREAM_JOB_ARTICLES_INDX=a"),
			problems: []string{"MEILISTREAM_JOB_ARTICLES_INDX: unknown per-job option (did you mean MEILISTREAM_JOB_ARTICLES_INDEX?)"},
		},
		{
			name: "per-job override values are checked at start",
			environ: withBase("MEILISTREAM_JOB_ARTICLES_BATCH_SIZE=-3", "MEILISTREAM_JOB_ARTICLES_FLUSH_INTERVAL=5",
				"MEILISTREAM_JOB_ARTICLES_SWEEP=maybe", "MEILISTREAM_JOB_ARTICLES_REINDEX=copy",
				"MEILISTREAM_JOB_ARTICLES_INDEX=a.b", "MEILISTREAM_JOB_ARTICLES_ON_DOCUMENT_ERROR=drop"),
			problems: []string{"6 problems:",
				`MEILISTREAM_JOB_ARTICLES_BATCH_SIZE: "-3" is not a whole number from 1 to 100000`,
				`MEILISTREAM_JOB_ARTICLES_FLUSH_INTERVAL: "5" is not a positive Go duration`,
				`MEILISTREAM_JOB_ARTICLES_SWEEP: "maybe" is not a boolean; accepts true or false`,
				`MEILISTREAM_JOB_ARTICLES_REINDEX: "copy" is not a choice; accepts swap or inplace`,
				`MEILISTREAM_JOB_ARTICLES_INDEX: "a.b" is not a Meilisearch index uid`,
				`MEILISTREAM_JOB_ARTICLES_ON_DOCUMENT_ERROR: "drop" is not a choice; accepts skip or fail`},
		},
		{
			name:     "both a secret and its _FILE is ambiguous",
			environ:  withBase("MEILISTREAM_MEILI_API_KEY="+testAPIKey, "MEILISTREAM_MEILI_API_KEY_FILE=/nonexistent"),
			problems: []string{"MEILISTREAM_MEILI_API_KEY_FILE: both MEILISTREAM_MEILI_API_KEY and MEILISTREAM_MEILI_API_KEY_FILE are set"},
		},
		{
			name:     "an unreadable _FILE names the path",
			environ:  withBase("MEILISTREAM_MEILI_API_KEY_FILE=/nonexistent/key"),
			problems: []string{"MEILISTREAM_MEILI_API_KEY_FILE: cannot read the file: open /nonexistent/key"},
		},
		{
			name: "every problem is reported at once",
			environ: withBase("MEILISTREAM_BATCH_SIZE=0", "MEILISTREAM_PAGE_SIZE=x",
				"MEILISTREAM_ON_HISTORY_LOST=no", "MEILISTREAM_LEASSE=1s"),
			problems: []string{"4 problems:", "MEILISTREAM_BATCH_SIZE", "MEILISTREAM_PAGE_SIZE",
				"MEILISTREAM_ON_HISTORY_LOST", "MEILISTREAM_LEASSE: unknown variable (did you mean MEILISTREAM_LEASE?)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.Load(tt.environ)
			if tt.problems == nil {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if fmt.Sprintf("%#v", rawConfig(got)) != fmt.Sprintf("%#v", rawConfig(tt.want)) {
					t.Errorf("Load gave\n%#v\nwant\n%#v", rawConfig(got), rawConfig(tt.want))
				}
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want an error with %q", tt.problems)
			}
			if !errors.Is(err, errs.ErrConfigInvalid) {
				t.Errorf("error is not CONFIG_INVALID: %v", err)
			}
			var ps config.Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Errorf("error carries no Problems: %v", err)
			}
			for _, p := range tt.problems {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error\n%v\ndoes not contain %q", err, p)
				}
			}
			for _, secret := range []string{"s3cr3t-pw", testAPIKey} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows a secret: %v", err)
				}
			}
		})
	}
}

// rawConfig is Config without its masking methods, to compare every field.
type rawConfigT struct {
	C    [23]string
	Jobs map[string]map[string]string
}

func rawConfig(c config.Config) rawConfigT {
	var r rawConfigT
	vals := []any{c.MongoDBURI, c.MongoDBDatabase, c.MeiliURL, c.MeiliAPIKey, c.ReplicaURI, c.ReplicaDatabase,
		c.Transforms, c.StateCollection, c.IndexPrefix, c.Lease, c.BatchSize, c.FlushInterval, c.PositionInterval,
		c.PageSize, c.OnHistoryLost, c.OnDocumentError, c.TransformTimeout, c.TransformPool, c.HTTPAddr,
		c.ReadyFile, c.ShutdownTimeout, c.LogLevel, c.LogFormat}
	for i, v := range vals {
		r.C[i] = fmt.Sprint(v)
	}
	r.Jobs = c.Jobs
	return r
}

func TestLoadLocalDoesNotNeedTheURI(t *testing.T) {
	c, err := config.LoadLocal([]string{"MEILISTREAM_TRANSFORMS=/x"})
	if err != nil {
		t.Fatalf("LoadLocal: %v", err)
	}
	if c.Transforms != "/x" {
		t.Errorf("Transforms = %q, want /x", c.Transforms)
	}
	if _, err := config.LoadLocal([]string{"MEILISTREAM_BATCH_SIZE=x"}); err == nil {
		t.Errorf("LoadLocal accepted a bad batch size")
	}
}

func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := config.Load([]string{
		"MEILISTREAM_MONGODB_URI_FILE=" + write("uri", testURI+"\n"),
		"MEILISTREAM_MEILI_API_KEY_FILE=" + write("key", testAPIKey+"\n"),
		"MEILISTREAM_REPLICA_URI_FILE=" + write("replica", "mongodb://r:pw@replica/copy"),
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.MongoDBURI != testURI || c.MeiliAPIKey != testAPIKey || c.ReplicaURI != "mongodb://r:pw@replica/copy" {
		t.Errorf("secrets from files: uri %q key %q replica %q", c.MongoDBURI, c.MeiliAPIKey, c.ReplicaURI)
	}
	if c.MongoDBDatabase != "shop" || c.ReplicaDatabase != "copy" {
		t.Errorf("databases from file URIs: %q, %q", c.MongoDBDatabase, c.ReplicaDatabase)
	}
}

func TestPrintedConfigHidesSecrets(t *testing.T) {
	c, err := config.Load([]string{
		"MEILISTREAM_MONGODB_URI=" + testURI,
		"MEILISTREAM_MEILI_API_KEY=" + testAPIKey,
		"MEILISTREAM_MEILI_URL=https://admin:meili-pw@meili.example",
		"MEILISTREAM_REPLICA_URI=mongodb://r:replica-pw@replica/copy?authMechanismProperties=AWS_SESSION_TOKEN:tok-xyz",
	})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"String":    c.String(),
		"%v":        fmt.Sprintf("%v", c),
		"%+v":       fmt.Sprintf("%+v", c),
		"%#v":       fmt.Sprintf("%#v", c),
		"JSON":      string(js),
		"Redacted":  fmt.Sprint(c.Redacted().MongoDBURI, c.Redacted().MeiliAPIKey, c.Redacted().ReplicaURI),
		"pointer%v": fmt.Sprintf("%v", &c),
	}
	for how, out := range outputs {
		for _, secret := range []string{"s3cr3t-pw", testAPIKey, "meili-pw", "replica-pw", "tok-xyz"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows secret %q: %s", how, secret, out)
			}
		}
	}
	if r := c.Redacted(); r.MongoDBURI != "mongodb://app:xxxxx@db1:27017,db2:27017/shop?replicaSet=rs0" {
		t.Errorf("Redacted URI = %q, want hosts, user and options kept", r.MongoDBURI)
	}
	if !strings.Contains(outputs["JSON"], `"batch_size":500`) || !strings.Contains(outputs["JSON"], `"lease":"30s"`) {
		t.Errorf("JSON misses plain values: %s", outputs["JSON"])
	}
	if c.MeiliAPIKey != testAPIKey {
		t.Errorf("Redacted changed the original")
	}
}

func TestSecretFileMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "key")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 70<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"a named pipe is refused at once instead of blocking the start", fifo, "MEILISTREAM_MEILI_API_KEY_FILE: cannot read the file: open " + fifo + ": not a regular file (a named pipe)"},
		{"a folder is refused", dir, "not a regular file (a folder)"},
		{"a file too large to be a key is refused", big, "larger than 64 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := config.Load([]string{"MEILISTREAM_MONGODB_URI=" + testURI, "MEILISTREAM_MEILI_API_KEY_FILE=" + tt.path})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, errs.ErrConfigInvalid) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Load: %v\nwant CONFIG_INVALID with %q", err, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Load is still blocked after 10s on a named pipe")
			}
		})
	}
}

func TestUnknownVariableSuggestsByMeaning(t *testing.T) {
	tests := []struct{ typo, want string }{
		{"MEILISTREAM_MEILI_KEY", "MEILISTREAM_MEILI_API_KEY"},
		{"MEILISTREAM_MEILI_MASTER_KEY", "MEILISTREAM_MEILI_API_KEY"},
		{"MEILISTREAM_API_KEY", "MEILISTREAM_MEILI_API_KEY"},
		{"MEILISTREAM_MEILISEARCH_API_KEY", "MEILISTREAM_MEILI_API_KEY"},
		{"MEILISTREAM_MEILI_KEY_FILE", "MEILISTREAM_MEILI_API_KEY_FILE"},
		{"MEILISTREAM_MEILI_API_KEY_FIEL", "MEILISTREAM_MEILI_API_KEY_FILE"},
		{"MEILISTREAM_MEILI_URI", "MEILISTREAM_MEILI_URL"},
		{"MEILISTREAM_MEILI_HOST", "MEILISTREAM_MEILI_URL"},
		{"MEILISTREAM_MEILISEARCH_URL", "MEILISTREAM_MEILI_URL"},
		{"MEILISTREAM_MONGODB_URL", "MEILISTREAM_MONGODB_URI"},
		{"MEILISTREAM_MONGO_URI", "MEILISTREAM_MONGODB_URI"},
		{"MEILISTREAM_MONGO_URL_FILE", "MEILISTREAM_MONGODB_URI_FILE"},
		{"MEILISTREAM_MONGODB_DB", "MEILISTREAM_MONGODB_DATABASE"},
		{"MEILISTREAM_REPLICA_URL", "MEILISTREAM_REPLICA_URI"},
		{"MEILISTREAM_REPLICA_DB", "MEILISTREAM_REPLICA_DATABASE"},
		{"MEILISTREAM_BATCHSIZE", "MEILISTREAM_BATCH_SIZE"},
		{"MEILISTREAM_LOGLEVEL", "MEILISTREAM_LOG_LEVEL"},
		{"MEILISTREAM_LEASSE", "MEILISTREAM_LEASE"},
		{"MEILISTREAM_LEASE_TTL", "MEILISTREAM_LEASE"},
		{"MEILISTREAM_HTTP_PORT", "MEILISTREAM_HTTP_ADDR"},
		{"MEILISTREAM_LISTEN_ADDRESS", "MEILISTREAM_HTTP_ADDR"},
		{"MEILISTREAM_TRANSFORMS_DIR", "MEILISTREAM_TRANSFORMS"},
		{"MEILISTREAM_TRANSFORM_PATH", "MEILISTREAM_TRANSFORMS"},
		{"MEILISTREAM_STATE_COLL", "MEILISTREAM_STATE_COLLECTION"},
		{"MEILISTREAM_TRANSFORM_TIMEOUTS", "MEILISTREAM_TRANSFORM_TIMEOUT"},
		{"MEILISTREAM_ON_DOC_ERROR", "MEILISTREAM_ON_DOCUMENT_ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.typo+" suggests "+tt.want, func(t *testing.T) {
			_, err := config.Load([]string{"MEILISTREAM_MONGODB_URI=" + testURI, tt.typo + "=x"})
			want := tt.typo + ": unknown variable (did you mean " + tt.want + "?)"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Load: %v\nwant %q", err, want)
			}
		})
	}
}
