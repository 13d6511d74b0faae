package jobdef_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/meilistream/meilistream/jobdef"
)

func TestJSONFieldsSplitsAnObjectAsTheDecoderDoes(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `,
		`{"id":1,"title":"Dune","n":-1.5e3,"ok":true,"no":null}`,
		`{"a":{"b":[1,{"c":"}]"}]},"d":"x\"y","e\u0041":[]}`,
		` {"a" : 1 , "b" : [ 1 , 2 ] } `,
		`{"s":"\\","t":"\\\""}`,
	} {
		fields, ok := jobdef.JSONFields([]byte(in))
		if !ok {
			t.Fatalf("JSONFields(%s) refused it", in)
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if len(fields) != len(want) {
			t.Fatalf("JSONFields(%s) = %d fields, want %d", in, len(fields), len(want))
		}
		for _, f := range fields {
			if string(f.Raw) != string(want[f.Key]) {
				t.Errorf("JSONFields(%s): %q = %s, want %s", in, f.Key, f.Raw, want[f.Key])
			}
		}
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1`, `{"a":"x}`, `{"a":1} x`, `"s"`} {
		if _, ok := jobdef.JSONFields([]byte(bad)); ok {
			t.Errorf("JSONFields(%s) split it", bad)
		}
	}
}

func TestJSONElementsAndMember(t *testing.T) {
	elems, ok := jobdef.JSONElements([]byte(` [ {"id":1,"a":[1,2]} , 2, "x,]", [] ] `))
	if !ok || len(elems) != 4 || string(elems[0]) != `{"id":1,"a":[1,2]}` || string(elems[2]) != `"x,]"` || string(elems[3]) != `[]` {
		t.Fatalf("JSONElements = %q, %v", elems, ok)
	}
	if e, ok := jobdef.JSONElements([]byte(`[]`)); !ok || len(e) != 0 {
		t.Fatalf("JSONElements([]) = %q, %v", e, ok)
	}
	for _, bad := range []string{`[1,]`, `[1`, `{}`, `[1 2]`} {
		if _, ok := jobdef.JSONElements([]byte(bad)); ok {
			t.Errorf("JSONElements(%s) split it", bad)
		}
	}
	if raw, ok := jobdef.JSONMember([]byte(`{"a":{"id":2},"id":"x"}`), "id"); !ok || string(raw) != `"x"` {
		t.Fatalf("JSONMember = %s, %v", raw, ok)
	}
	if _, ok := jobdef.JSONMember([]byte(`{"a":1}`), "id"); ok {
		t.Fatal("JSONMember found a member that is not there")
	}
}

// jsonStrings are JSON string tokens whose end a scan can mistake: quotes
// after odd and even runs of backslashes, escapes of either spelled in
// \u form, and the same inside nested values.
func jsonStrings() []string {
	tokens := []string{
		`""`, `"\""`, `"\\"`, `"\\\""`, `"\\\\"`, `"a\"b\\\"c\\"`, `"\/"`,
		`"\u0022"`, `"\u005c"`, `"\u005C\""`, `"\\u0022"`, `"\ud83d\ude00"`, `"é\"ü"`,
		`"\"\"\"\""`, `"x\\\\\\\\\"y\\\\\\\\"`,
	}
	for n := 0; n <= 40; n++ {
		run := strings.Repeat(`\`, n)
		for _, s := range []string{run, run + `"`, `"` + run, run + `"` + run + `"`, "a" + run + "\u00e9" + run} {
			b, err := json.Marshal(s)
			if err != nil {
				panic(err)
			}
			tokens = append(tokens, string(b))
		}
	}
	return tokens
}

func TestJSONFieldsFindsAStringsEndPastEveryEscape(t *testing.T) {
	for _, tok := range jsonStrings() {
		for _, in := range []string{
			`{` + tok + `:` + tok + `,"after":1}`,
			`{"a":[` + tok + `,{` + tok + `:` + tok + `}],` + tok + `:"}"}`,
			`{"a":` + tok + `}`,
		} {
			fieldsAsTheDecoder(t, []byte(in))
		}
		// Cut before its closing quote, the string does not end.
		open := `{"a":` + tok[:len(tok)-1]
		if _, ok := jobdef.JSONFields([]byte(open + `}`)); ok {
			t.Errorf("JSONFields(%s}) split an object whose string does not end", open)
		}
	}
}

// fieldsAsTheDecoder checks JSONFields' split of the JSON object in
// against encoding/json's: the same keys (decoded), the same raw values.
func fieldsAsTheDecoder(t *testing.T, in []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("encoding/json refused %s: %v", in, err)
	}
	fields, ok := jobdef.JSONFields(in)
	if !ok {
		t.Fatalf("JSONFields(%s) refused it", in)
	}
	got := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		got[f.Key] = f.Raw // the last of a key, as the decoder keeps it
	}
	if len(got) != len(want) {
		t.Fatalf("JSONFields(%s) = %d keys, want %d", in, len(got), len(want))
	}
	for k, raw := range want {
		if string(got[k]) != string(raw) {
			t.Errorf("JSONFields(%s): %q = %s, want %s", in, k, got[k], raw)
		}
	}
}

func FuzzJSONFields(f *testing.F) {
	for _, tok := range jsonStrings() {
		f.Add([]byte(`{` + tok + `:[` + tok + `],"b":{"c":` + tok + `}}`))
	}
	f.Add([]byte(` {"id":1,"n":-1.5e3,"ok":true,"no":null,"o":{}} `))
	f.Fuzz(func(t *testing.T, in []byte) {
		// Where the decoder's answer is defined alike: a valid object of
		// valid UTF-8 (the decoder replaces invalid bytes in keys).
		if !utf8.Valid(in) || !json.Valid(in) || bytes.TrimLeft(in, " \t\r\n")[0] != '{' {
			return
		}
		fieldsAsTheDecoder(t, in)
		fields, _ := jobdef.JSONFields(in)
		seen := map[string]int{}
		for _, f := range fields {
			seen[f.Key]++
		}
		for _, f := range fields {
			if seen[f.Key] == 1 && f.Raw[0] == '[' {
				elementsAsTheDecoder(t, in, f.Key)
			}
		}
	})
}

// elementsAsTheDecoder checks JSONMemberElements' split of the array
// member key of the JSON object in against encoding/json's.
func elementsAsTheDecoder(t *testing.T, in []byte, key string) {
	t.Helper()
	var page map[string]json.RawMessage
	if err := json.Unmarshal(in, &page); err != nil {
		t.Fatalf("encoding/json refused %s: %v", in, err)
	}
	var want []json.RawMessage
	if err := json.Unmarshal(page[key], &want); err != nil {
		t.Fatalf("encoding/json refused %q of %s: %v", key, in, err)
	}
	elems, ok := jobdef.JSONMemberElements(in, key)
	if !ok {
		t.Fatalf("JSONMemberElements(%s, %q) refused it", in, key)
	}
	if len(elems) != len(want) {
		t.Fatalf("JSONMemberElements(%s, %q) = %d elements, want %d", in, key, len(elems), len(want))
	}
	for i := range want {
		if string(elems[i]) != string(want[i]) {
			t.Errorf("JSONMemberElements(%s, %q)[%d] = %s, want %s", in, key, i, elems[i], want[i])
		}
	}
}

func TestJSONMemberElementsSplitsTheArrayItFinds(t *testing.T) {
	for _, in := range []string{
		`{"results":[],"offset":0,"limit":20,"total":0}`,
		`{"results":[{"id":"1","t":"a]\"}"},{"id":2,"a":[1,[2]]}],"total":2}`,
		` { "offset" : 0 , "results" : [ {"results":[9]} , "x,]" , 3 ] } `,
		`{"a":{"results":[1]},"results":[2,3]}`,
	} {
		elementsAsTheDecoder(t, []byte(in), "results")
	}
	for _, bad := range []string{
		`{"offset":0}`, `{"results":{}}`, `{"results":"[]"}`, `{"results":[1,]}`, `{"results":[1`,
		`{"a":{"results":[1]}}`, `{"x":"y,"results":[1]}`, `[{"results":[1]}]`,
	} {
		if elems, ok := jobdef.JSONMemberElements([]byte(bad), "results"); ok {
			t.Errorf("JSONMemberElements(%s) = %q", bad, elems)
		}
	}
}

// Finding a member compares keys where they are: verify finds the primary
// key of every document it reads back, and most members come before it.
func TestJSONMemberAllocatesNothing(t *testing.T) {
	doc := []byte(`{"title":"Dune","body":"a \"quoted\" word","tags":["sf","novel"],"n":3,"id":"7"}`)
	var raw []byte
	allocs := testing.AllocsPerRun(100, func() {
		raw, _ = jobdef.JSONMember(doc, "id")
	})
	if string(raw) != `"7"` {
		t.Fatalf("JSONMember = %s", raw)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations to find a member", allocs)
	}
	if raw, ok := jobdef.JSONMember([]byte(`{"i\u0064x":1,"i\u0064":"8"}`), "id"); !ok || string(raw) != `"8"` {
		t.Fatalf("JSONMember of an escaped key = %s, %v", raw, ok)
	}
}
