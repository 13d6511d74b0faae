package transform_test

import (
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// A *.js file in the folder that is not a transform (a mounted secret,
// say) must never have its text in an error: not in a ReferenceError, a
// TypeError or a SyntaxError while loading. The file, line and column and
// the kind of error say where to look.
func TestALoadErrorNeverQuotesTheFile(t *testing.T) {
	const secret = "sk_live_51HxSECRETx9"
	files := map[string]string{
		"reference":      "API_KEY=" + secret + "\n",
		"typeerror":      "const k = '" + secret + "'; k.x.y;\n",
		"not a function": secret + "();\n",
		"thrown":         "throw new Error('" + secret + "');\n",
		"thrown string":  "throw '" + secret + "';\n",
		"syntax":         "password: " + secret + " {\n",
		"label":          secret + ": " + secret + ": 1;\n",
		"regexp":         "x = /(?<" + secret + ">a)(?<" + secret + ">b)/;\n",
		"escape":         "x = \\u{" + secret + "};\n",
		"number":         "x = 0x" + secret + ";\n",
		"redeclared":     "let " + secret + "; let " + secret + ";\n",
		"template":       "`" + secret + "\n",
		"json":           `{"key": "` + secret + `"}` + "\n",
		"yaml":           "key: " + secret + "\nother: " + secret + "\n",
	}
	for name, src := range files {
		_, err := transform.Load(writeFiles(t, map[string]string{"secret.js": src}), transform.Options{})
		if err == nil {
			t.Errorf("%s: loaded", name)
			continue
		}
		if code := errs.CodeOf(err); code != errs.TransformFailed && code != errs.ConfigInvalid {
			t.Errorf("%s: %v", name, err)
		}
		if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "secret.js") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A file written for Node is told what it misses.
func TestALoadErrorNamesAMissingNodeGlobal(t *testing.T) {
	_, err := transform.Load(writeFiles(t, map[string]string{"job.js": "const fs = require('fs');"}), transform.Options{})
	wantErr(t, err, errs.TransformFailed, "job.js:1:19: ReferenceError: require is not defined")
}
