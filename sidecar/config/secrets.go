package config

import (
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Mask replaces a password or a secret option value in a printed URI.
const Mask = "xxxxx"

// redactURL masks the password of a URI's user info and the values of
// query options that look like secrets (secretOption). It works on the
// text, not net/url, because MongoDB URIs list several hosts
// ("h1:27017,h2:27017"), which net/url refuses; and it masks what any of
// the parsers that may read the URI would take for a secret (secretSpans),
// so that a password holding an unescaped '?', '#' or '@', or a query the
// parsers find in different places, never shows.
func redactURL(s string) string {
	scheme, rest, ok := cutScheme(s)
	var b strings.Builder
	b.WriteString(scheme)
	at := 0
	for _, sp := range merged(secretSpans(rest, ok)) {
		b.WriteString(rest[at:sp.lo])
		b.WriteString(Mask)
		at = sp.hi
	}
	b.WriteString(rest[at:])
	return b.String()
}

// span is a part of a URI's text, rest[lo:hi].
type span struct{ lo, hi int }

// secretSpans returns the parts of rest (a URI after its scheme; auth:
// it had one, so it may hold a user info) that either parser reads as a
// secret, each parser's apart (merged joins them). Two parsers read the URIs of
// the configuration, and they disagree:
//
//   - the MongoDB driver (x/mongo/driver/connstring, parser.parse) takes
//     everything before the first '@' of the whole string as the user
//     info, so "mongodb://u:p?a#ss@h/db" has the password "p?a#ss", and
//     reads the options from the first '?' after it;
//   - Go's net/url (the Meilisearch client) cuts the fragment at the first
//     '#', the query at the first '?', the authority at the first '/', and
//     takes the user info up to the last '@' of that authority; so in
//     "a://?token=@" it reads the option token with the value "@", where
//     the driver reads a user name.
//
// Each one's password and secret option values are masked.
func secretSpans(rest string, auth bool) []span {
	var out []span
	password := func(end int) {
		if c := strings.IndexByte(rest[:end], ':'); c >= 0 {
			out = append(out, span{c + 1, end})
		}
	}
	query := func(lo, hi int) {
		for lo <= hi {
			end := strings.IndexByte(rest[lo:hi], '&')
			if end < 0 {
				end = hi
			} else {
				end += lo
			}
			if eq := strings.IndexByte(rest[lo:end], '='); eq >= 0 && secretOption(rest[lo:lo+eq]) {
				out = append(out, span{lo + eq + 1, end})
			}
			lo = end + 1
		}
	}
	driver, netURL := -1, -1
	if auth {
		driver, netURL = userInfoEnds(rest)
	}
	// The driver: its user info, then the options from the first '?'
	// after it (a '#' in a value stays in the masked value).
	start := 0
	if driver >= 0 {
		password(driver)
		start = driver + 1
	}
	if q := strings.IndexByte(rest[start:], '?'); q >= 0 {
		query(start+q+1, len(rest))
	}
	// net/url: its user info, then the query from the first '?' to the
	// first '#'.
	if netURL >= 0 {
		password(netURL)
	}
	body := rest
	if f := strings.IndexByte(body, '#'); f >= 0 {
		body = body[:f]
	}
	if q := strings.IndexByte(body, '?'); q >= 0 {
		query(q+1, len(body))
	}
	return out
}

// merged is spans in order, the empty ones left out and those that
// overlap or touch joined.
func merged(spans []span) []span {
	s := slices.Clone(spans)
	sort.Slice(s, func(a, b int) bool { return s[a].lo < s[b].lo })
	var out []span
	for _, sp := range s {
		if sp.lo >= sp.hi {
			continue
		}
		if n := len(out); n > 0 && sp.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, sp.hi)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// cutScheme splits a URI after its "scheme://", or after a leading "//"
// (net/url reads a user info there too); ok is false when it has neither.
// What comes before "://" is a scheme only when it is spelled as one
// (RFC 3986: a letter, then letters, digits, '+', '-' or '.'): in
// "?://key=x" net/url reads a query from the first '?', so that query
// must be what is masked.
func cutScheme(s string) (scheme, rest string, ok bool) {
	if strings.HasPrefix(s, "//") {
		return "//", s[2:], true
	}
	if i := strings.Index(s, "://"); i >= 0 && isScheme(s[:i]) {
		return s[:i+3], s[i+3:], true
	}
	return "", s, false
}

// isScheme says whether s is spelled as a URI scheme (RFC 3986, 3.1).
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// userInfoEnds returns where each parser ends the user info of rest (-1:
// none), see secretSpans.
func userInfoEnds(rest string) (driver, netURL int) {
	authority := rest
	if i := strings.IndexAny(authority, "#?/"); i >= 0 {
		authority = authority[:i]
	}
	return strings.Index(rest, "@"), strings.LastIndex(authority, "@")
}

// secretOption says whether a query option's value is a secret: its name
// speaks of a password, token, key, secret, signature or credentials, or
// it is MongoDB's authMechanismProperties (which carries
// AWS_SESSION_TOKEN). authSource and authMechanism name no secret.
func secretOption(name string) bool {
	l := strings.ToLower(name)
	if u, err := url.QueryUnescape(l); err == nil {
		l = u
	}
	for _, w := range []string{"pass", "pwd", "token", "secret", "key", "signature", "credential"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return l == "authmechanismproperties" || l == "sig" || l == "auth"
}

// uriSecrets returns the secrets a URI holds, as they may be printed: the
// password of its user info and the values of its secret options, as
// either parser reads them (secretSpans), each raw and unescaped.
func uriSecrets(uri string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
	}
	_, rest, ok := cutScheme(uri)
	for _, sp := range secretSpans(rest, ok) {
		v := rest[sp.lo:sp.hi]
		add(v)
		if v, _, cut := strings.Cut(v, "#"); cut {
			add(v)
		}
	}
	return out
}

// Secrets returns every secret the configuration holds, in every form it
// may be printed in: the Meilisearch key, the passwords and secret options
// of the URIs (raw and unescaped). Scrubber masks them in any text.
func (c Config) Secrets() []string {
	var out []string
	if c.MeiliAPIKey != "" {
		out = append(out, c.MeiliAPIKey)
	}
	for _, u := range []string{c.MongoDBURI, c.ReplicaURI, c.MeiliURL} {
		out = append(out, uriSecrets(u)...)
	}
	return out
}

// Scrubber masks a configuration's secrets in any text: the last line of
// defence for what the sidecar prints (logs, /status, /readyz, a command's
// error), whatever error text of a driver or library carries a URI or a
// key. Each secret is masked as written, URL-escaped, JSON-escaped (a log
// line or /status is JSON) and Go-quoted (%q). A nil *Scrubber changes
// nothing.
type Scrubber struct {
	r *strings.Replacer
}

// minSecret is the shortest secret masked in free text: a one- or
// two-letter password would otherwise mask every such letter of every log
// line, and is no secret worth the name.
const minSecret = 3

// NewScrubber returns a Scrubber of secrets (Config.Secrets).
func NewScrubber(secrets []string) *Scrubber { return newScrubber(secrets, minSecret) }

// newScrubber masks the secrets of at least minLen bytes.
func newScrubber(secrets []string, minLen int) *Scrubber {
	forms := map[string]bool{}
	for _, s := range secrets {
		if len(s) < max(minLen, 1) {
			continue
		}
		forms[s] = true
		forms[url.QueryEscape(s)] = true
		forms[url.PathEscape(s)] = true
		if b, err := json.Marshal(s); err == nil {
			forms[string(b[1:len(b)-1])] = true
		}
		q := strconv.Quote(s)
		forms[q[1:len(q)-1]] = true
	}
	if len(forms) == 0 {
		return nil
	}
	list := make([]string, 0, len(forms))
	for f := range forms {
		list = append(list, f)
	}
	// The longest first: a secret that holds another is masked whole.
	sort.Slice(list, func(a, b int) bool {
		if len(list[a]) != len(list[b]) {
			return len(list[a]) > len(list[b])
		}
		return list[a] < list[b]
	})
	pairs := make([]string, 0, 2*len(list))
	for _, f := range list {
		pairs = append(pairs, f, Mask)
	}
	return &Scrubber{r: strings.NewReplacer(pairs...)}
}

// Scrub returns s with every secret masked.
func (sc *Scrubber) Scrub(s string) string {
	if sc == nil {
		return s
	}
	return sc.r.Replace(s)
}

// Writer returns w masking the secrets in each Write. A secret is found
// when it lies within one Write: the loggers write a whole line per call,
// and the commands a whole message.
func (sc *Scrubber) Writer(w io.Writer) io.Writer {
	if sc == nil {
		return w
	}
	return scrubWriter{sc: sc, w: w}
}

type scrubWriter struct {
	sc *Scrubber
	w  io.Writer
}

func (s scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, s.sc.Scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
