package durable

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Accepted says which forms of a cluster time Parse takes, for the error
// a client sees.
const Accepted = `SECONDS.INCREMENT (e.g. 1764633600.17: the operationTime of a write, its seconds and increment) or Extended JSON {"$timestamp":{"t":SECONDS,"i":INCREMENT}}`

// Parse reads a cluster time as an application has it after a write (its
// reply's operationTime): SECONDS.INCREMENT, both unsigned 32-bit
// decimal integers (the increment is a count, not a fraction: 17.5 is the
// fifth write of second 17), or the Extended JSON form
// {"$timestamp":{"t":S,"i":I}}.
func Parse(s string) (bson.Timestamp, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		return parseJSON(s)
	}
	sec, inc, ok := strings.Cut(s, ".")
	if !ok {
		return bson.Timestamp{}, fmt.Errorf("cluster time %q has no increment; want %s", clip(s), Accepted)
	}
	t, err1 := parseUint32(sec)
	i, err2 := parseUint32(inc)
	if err1 != nil || err2 != nil {
		return bson.Timestamp{}, fmt.Errorf("cluster time %q is not two unsigned 32-bit integers; want %s", clip(s), Accepted)
	}
	return bson.Timestamp{T: t, I: i}, nil
}

func parseUint32(s string) (uint32, error) {
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err
}

func parseJSON(s string) (bson.Timestamp, error) {
	var v struct {
		TS *struct {
			T *float64 `json:"t"`
			I *float64 `json:"i"`
		} `json:"$timestamp"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || dec.More() || v.TS == nil || v.TS.T == nil || v.TS.I == nil {
		return bson.Timestamp{}, fmt.Errorf("cluster time %q is not Extended JSON {\"$timestamp\":{\"t\":S,\"i\":I}}; want %s", clip(s), Accepted)
	}
	t, ok1 := u32(*v.TS.T)
	i, ok2 := u32(*v.TS.I)
	if !ok1 || !ok2 {
		return bson.Timestamp{}, fmt.Errorf("cluster time %q: t and i must be unsigned 32-bit integers; want %s", clip(s), Accepted)
	}
	return bson.Timestamp{T: t, I: i}, nil
}

func u32(f float64) (uint32, bool) {
	if f < 0 || f > math.MaxUint32 || f != math.Trunc(f) {
		return 0, false
	}
	return uint32(f), true
}

// clip keeps an echoed input short: an error quotes what it refused, not
// whatever a client sent.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// Format writes ts as Parse reads it: SECONDS.INCREMENT.
func Format(ts bson.Timestamp) string { return fmt.Sprintf("%d.%d", ts.T, ts.I) }

// covers says whether durable time d covers cluster time after.
func covers(d, after bson.Timestamp) bool { return !d.Before(after) }
