package replicate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// indexOptions are the index fields that change what an index holds or
// enforces; two indexes of one name differing in any of them are reported as
// a mismatch. Others (v, ns, background) are the server's business.
var indexOptions = []string{
	"key", "unique", "sparse", "partialFilterExpression", "expireAfterSeconds",
	"collation", "weights", "default_language", "language_override",
	"wildcardProjection", "hidden",
}

// SyncIndexes gives the replica collection the source collection's indexes
// (other than _id) at the first backfill, and reports differences later
// without changing anything.
//
// The first backfill is when the replica collection holds no document: then
// every source index it lacks is created (listIndexes on the source,
// createIndexes on the replica, each spec as the source has it, minus
// v/ns/background). Otherwise an index missing on the replica or different
// from the source's is logged at warn, never forced: the replica's owner may
// have chosen otherwise (an analytics copy with its own indexes), and
// building an index on a large live collection is a decision for a person.
// It returns the names of the indexes it created.
func SyncIndexes(ctx context.Context, log hclog.Logger, source, replica *mongo.Collection) ([]string, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	want, err := listIndexes(ctx, source)
	if err != nil {
		return nil, fmt.Errorf("list indexes of source %s: %w", fullName(source), err)
	}
	have, err := listIndexes(ctx, replica)
	if err != nil {
		return nil, fmt.Errorf("list indexes of replica %s: %w", fullName(replica), err)
	}
	empty, err := isEmpty(ctx, replica)
	if err != nil {
		return nil, fmt.Errorf("count replica %s: %w", fullName(replica), err)
	}

	var missing []bson.Raw
	var names []string
	for _, name := range sortedKeys(want) {
		spec := want[name]
		got, ok := have[name]
		switch {
		case !ok:
			missing = append(missing, spec)
			names = append(names, name)
		case !sameIndex(spec, got):
			log.Warn("replica index differs from the source's; left as it is",
				"index", name, "source_spec", spec.String(), "replica_spec", got.String())
		}
	}
	for _, name := range sortedKeys(have) {
		if _, ok := want[name]; !ok {
			log.Info("replica has an index the source has not; left as it is", "index", name)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if !empty {
		log.Warn("source indexes missing on the replica; not created because the replica already holds documents (create them by hand if you want them)",
			"indexes", strings.Join(names, ","))
		return nil, nil
	}
	specs := make(bson.A, 0, len(missing))
	for _, spec := range missing {
		specs = append(specs, createSpec(spec))
	}
	cmd := bson.D{{Key: "createIndexes", Value: replica.Name()}, {Key: "indexes", Value: specs}}
	if err := replica.Database().RunCommand(ctx, cmd).Err(); err != nil {
		// A unique index built over documents that break it answers E11000
		// with the duplicated value: redacted.
		return nil, fmt.Errorf("create indexes %s on replica %s: %w", strings.Join(names, ","), fullName(replica), redacted(err))
	}
	log.Info("created the source's indexes on the replica", "indexes", strings.Join(names, ","))
	return names, nil
}

// listIndexes returns a collection's index specs by name, _id_ left out. A
// missing collection has none (the driver turns NamespaceNotFound into an
// empty cursor).
func listIndexes(ctx context.Context, c *mongo.Collection) (map[string]bson.Raw, error) {
	cur, err := c.Indexes().List(ctx)
	if err != nil {
		return nil, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	out := map[string]bson.Raw{}
	for cur.Next(ctx) {
		spec := slices.Clone(cur.Current)
		name, ok := spec.Lookup("name").StringValueOK()
		if !ok || name == "_id_" {
			continue
		}
		out[name] = spec
	}
	return out, cur.Err()
}

func isEmpty(ctx context.Context, c *mongo.Collection) (bool, error) {
	err := c.FindOne(ctx, bson.D{}, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return true, nil
	}
	return false, err
}

// createSpec is spec as createIndexes takes it: the server picks the index
// version, and ns/background are obsolete.
func createSpec(spec bson.Raw) bson.D {
	elems, _ := spec.Elements()
	d := make(bson.D, 0, len(elems))
	for _, e := range elems {
		switch e.Key() {
		case "v", "ns", "background":
			continue
		}
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	return d
}

// sameIndex compares the options that matter (indexOptions). Numbers are
// compared by value: servers differ in whether they keep {a: 1} as an int32
// or a double, and whether unique: true comes back at all when false.
func sameIndex(a, b bson.Raw) bool {
	for _, k := range indexOptions {
		va, errA := a.LookupErr(k)
		vb, errB := b.LookupErr(k)
		if errA != nil || errB != nil {
			if (errA == nil && !isFalsy(va)) || (errB == nil && !isFalsy(vb)) {
				return false
			}
			continue
		}
		if !equalValue(va, vb) {
			return false
		}
	}
	return true
}

func isFalsy(v bson.RawValue) bool {
	if b, ok := v.BooleanOK(); ok {
		return !b
	}
	return false
}

// equalValue compares two BSON values, numbers by value and documents field
// by field in order (an index key's field order is its meaning).
func equalValue(a, b bson.RawValue) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	if a.Type != b.Type {
		return false
	}
	if a.Type == bson.TypeEmbeddedDocument || a.Type == bson.TypeArray {
		ea, errA := bson.Raw(a.Value).Elements()
		eb, errB := bson.Raw(b.Value).Elements()
		if errA != nil || errB != nil || len(ea) != len(eb) {
			return false
		}
		for i := range ea {
			if ea[i].Key() != eb[i].Key() || !equalValue(ea[i].Value(), eb[i].Value()) {
				return false
			}
		}
		return true
	}
	return bytes.Equal(a.Value, b.Value)
}

func number(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	}
	return 0, false
}

func sortedKeys(m map[string]bson.Raw) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func fullName(c *mongo.Collection) string {
	return c.Database().Name() + "." + c.Name()
}
