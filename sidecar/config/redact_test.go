package config_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/meilistream/meilistream/sidecar/config"
)

func TestRedactedURIsHideEveryPassword(t *testing.T) {
	tests := []struct {
		name, uri, want string
	}{
		{"a plain password", "mongodb://app:pw-1234@h1:27017,h2/shop?replicaSet=rs0", "mongodb://app:xxxxx@h1:27017,h2/shop?replicaSet=rs0"},
		{"an unescaped ? in the password (the driver accepts it)", "mongodb://app:pw?1234@h/shop", "mongodb://app:xxxxx@h/shop"},
		{"an unescaped # in the password", "mongodb://app:pw#1234@h/shop?replicaSet=rs0", "mongodb://app:xxxxx@h/shop?replicaSet=rs0"},
		{"both ? and # in the password", "mongodb://app:p?w#1234@h:27017/?replicaSet=rs0", "mongodb://app:xxxxx@h:27017/?replicaSet=rs0"},
		{"an @ escaped in the password", "mongodb://app:p%40w-1234@h/shop", "mongodb://app:xxxxx@h/shop"},
		{"no password", "mongodb://app@h/shop", "mongodb://app@h/shop"},
		{"no user info", "mongodb://h/shop?appName=a", "mongodb://h/shop?appName=a"},
		{"a secret option", "mongodb://h/shop?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok-1234", "mongodb://h/shop?authMechanism=MONGODB-AWS&authMechanismProperties=xxxxx"},
		{"a TLS key password option", "mongodb://h/?tlsCertificateKeyFilePassword=pw-1234&tls=true", "mongodb://h/?tlsCertificateKeyFilePassword=xxxxx&tls=true"},
		{"an http URL with user info", "https://admin:pw-1234@meili.example/base", "https://admin:xxxxx@meili.example/base"},
		{"an http URL with a # in the password", "https://admin:pw#1234@meili.example", "https://admin:xxxxx@meili.example"},
		{"an http URL with a key in its query", "http://meili:7700/?apiKey=key-1234&x=1", "http://meili:7700/?apiKey=xxxxx&x=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Config{MongoDBURI: tt.uri, ReplicaURI: tt.uri, MeiliURL: tt.uri}
			r := c.Redacted()
			for _, got := range []string{r.MongoDBURI, r.ReplicaURI, r.MeiliURL} {
				if got != tt.want {
					t.Errorf("redacted %q = %q, want %q", tt.uri, got, tt.want)
				}
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, out := range []string{c.String(), string(js)} {
				for _, secret := range []string{"1234"} {
					if strings.Contains(tt.uri, secret) && strings.Contains(out, secret) {
						t.Errorf("printed configuration shows %q: %s", secret, out)
					}
				}
			}
		})
	}
}

func TestScrubberMasksSecretsInAnyText(t *testing.T) {
	c := config.Config{
		MongoDBURI:  "mongodb://app:p?w#1234@h/shop",
		MeiliURL:    "http://meili:7700/?token=tok<&>9876",
		MeiliAPIKey: "key-abcdef",
		ReplicaURI:  "mongodb://r:p%40ss-5678@h/copy",
	}
	sc := config.NewScrubber(c.Secrets())
	texts := []string{
		`Get "http://meili:7700/?token=tok<&>9876/indexes": dial tcp: connection refused`,
		`{"error":"` + jsonEscape("tok<&>9876 and key-abcdef") + `"}`,
		`auth failed for p?w#1234`,
		`password p@ss-5678 or p%40ss-5678`,
		`quoted "key-abcdef"` + ` %q: ` + `"p?w#1234"`,
	}
	for _, text := range texts {
		out := sc.Scrub(text)
		for _, secret := range []string{"tok<&>9876", "key-abcdef", "p?w#1234", "p@ss-5678", "p%40ss-5678", jsonEscape("tok<&>9876")} {
			if strings.Contains(out, secret) {
				t.Errorf("Scrub(%q) = %q still shows %q", text, out, secret)
			}
		}
	}
	var b strings.Builder
	if _, err := sc.Writer(&b).Write([]byte("log line with key-abcdef\n")); err != nil {
		t.Fatal(err)
	}
	if b.String() != "log line with xxxxx\n" {
		t.Errorf("Writer wrote %q", b.String())
	}
	if got := (*config.Scrubber)(nil).Scrub("x"); got != "x" {
		t.Errorf("a nil Scrubber changed the text: %q", got)
	}
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// FuzzRedactedURI: whatever the URI, neither the MongoDB driver nor Go's
// net/url (the two parsers that read the configuration's URIs) reads a
// password or a secret option out of the redacted URI, the redacted URI
// shows the password fewer times than the URI did, and the Scrubber built
// from the configuration masks the password in the URI's own text.
//
//	go test ./sidecar/config -run '^$' -fuzz FuzzRedactedURI -fuzztime 30s
func FuzzRedactedURI(f *testing.F) {
	for _, s := range []string{
		"mongodb://app:pw-1234@h1:27017,h2/shop?replicaSet=rs0",
		"mongodb://app:p?w#1234@h/shop",
		"mongodb://app:pw@h/?authMechanismProperties=AWS_SESSION_TOKEN:tok",
		"https://admin:pw#1234@meili.example",
		"http://meili:7700/?apiKey=key-1234#frag",
		"mongodb+srv://u:p@cluster.example/db",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		c := config.Config{MongoDBURI: uri, ReplicaURI: uri, MeiliURL: uri}
		r := c.Redacted()
		sc := config.NewScrubber(c.Secrets())
		for _, out := range []string{r.MongoDBURI, r.ReplicaURI, r.MeiliURL} {
			var passwords []string
			if strings.HasPrefix(uri, "mongodb://") {
				if cs, err := connstring.Parse(uri); err == nil && cs.PasswordSet && cs.Password != "" {
					passwords = append(passwords, cs.Password)
					if cs2, err := connstring.Parse(out); err == nil && cs2.Password != "" && cs2.Password != config.Mask {
						t.Fatalf("the driver reads password %q out of redacted %q (from %q)", cs2.Password, out, uri)
					}
				}
			}
			if u, err := url.Parse(uri); err == nil {
				if p, ok := u.User.Password(); ok && p != "" {
					passwords = append(passwords, p)
					if u2, err := url.Parse(out); err == nil {
						if p2, _ := u2.User.Password(); p2 != "" && p2 != config.Mask {
							t.Fatalf("net/url reads password %q out of redacted %q (from %q)", p2, out, uri)
						}
					}
				}
				for k, vs := range u.Query() {
					l := strings.ToLower(k)
					if !strings.Contains(l, "key") && !strings.Contains(l, "password") && !strings.Contains(l, "token") {
						continue
					}
					u2, err := url.Parse(out)
					if err != nil {
						continue
					}
					for _, v := range u2.Query()[k] {
						if v != config.Mask && v != "" && contains(vs, v) {
							t.Fatalf("option %s keeps its value %q in redacted %q (from %q)", k, v, out, uri)
						}
					}
				}
			}
			for _, p := range passwords {
				if strings.ContainsAny(p, "x") || !strings.Contains(uri, p) {
					continue // the mask may spell it; or it was escaped
				}
				if strings.Count(out, p) >= strings.Count(uri, p) {
					t.Fatalf("redacted %q still shows password %q (from %q)", out, p, uri)
				}
				if len(p) >= 3 && strings.Count(sc.Scrub(uri), p) >= strings.Count(uri, p) {
					t.Fatalf("the Scrubber leaves password %q in %q", p, sc.Scrub(uri))
				}
			}
		}
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
