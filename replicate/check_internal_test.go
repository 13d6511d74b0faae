package replicate

import "testing"

// The in-process test server is always a replica set primary, so what a
// standalone or a secondary answers is tested here on the hello replies
// themselves (shapes from src/mongo/db/repl/hello/hello.idl: a standalone
// has no setName, a mongos says msg "isdbgrid").
func TestHelloClassification(t *testing.T) {
	cases := []struct {
		name                 string
		h                    helloReply
		replicated, writable bool
	}{
		{"a standalone has no change streams but takes writes", helloReply{IsWritablePrimary: true}, false, true},
		{"a replica set primary has both", helloReply{SetName: "rs0", IsWritablePrimary: true}, true, true},
		{"a secondary has change streams and takes no writes", helloReply{SetName: "rs0", Secondary: true}, true, false},
		{"a mongos has both", helloReply{Msg: "isdbgrid", IsWritablePrimary: true}, true, true},
		{"a read-only primary takes no writes", helloReply{SetName: "rs0", IsWritablePrimary: true, ReadOnly: true}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.h.replicated(); got != c.replicated {
				t.Errorf("replicated() = %v", got)
			}
			if got := c.h.writable(); got != c.writable {
				t.Errorf("writable() = %v", got)
			}
		})
	}
}

func TestSameDeployment(t *testing.T) {
	a := helloReply{SetName: "rs0", Hosts: []string{"h1:27017", "h2:27017"}, Me: "h1:27017"}
	b := helloReply{SetName: "rs0", Hosts: []string{"h2:27017", "h3:27017"}, Me: "h2:27017"}
	c := helloReply{SetName: "rs0", Hosts: []string{"other:27017"}, Me: "other:27017"}
	if !a.sameDeployment(b) {
		t.Error("two members of one set are one deployment")
	}
	if a.sameDeployment(c) {
		t.Error("two sets with one name and no member in common are two deployments")
	}
	if (helloReply{}).sameDeployment(helloReply{}) {
		t.Error("two standalones are not known to be one")
	}
}
