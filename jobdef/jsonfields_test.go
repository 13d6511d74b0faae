package jobdef_test

import (
	"encoding/json"
	"testing"

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
