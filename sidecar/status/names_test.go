package status_test

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/sidecar/status"
)

// Every key of /status is snake_case, as the configuration's are: one
// spelling for an operator's jq filters and alert templates, not two.
func TestStatusKeysAreSnakeCase(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() != reflect.TypeOf(status.Job{}).PkgPath() {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" && !f.Anonymous {
				t.Errorf("%s.%s has no json name", path, f.Name)
			} else if name != "" && !snake.MatchString(name) {
				t.Errorf("%s.%s is %q in /status, not snake_case", path, f.Name, name)
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeOf(status.Report{}), "Report")
	walk(reflect.TypeOf(status.Job{}), "Job")
	if len(seen) < 4 {
		t.Fatalf("walked %d types; want Report, Job and their parts", len(seen))
	}
}
