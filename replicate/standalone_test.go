package replicate_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/replicate"
)

// standalone is the smallest server the driver takes for a standalone
// mongod: hello answers without setName (and not "isdbgrid"), every other
// command answers ok. internal/mongotest is always a replica set primary,
// and the capability check is about what a standalone says.
func standalone(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	hello, _ := bson.Marshal(bson.D{
		{Key: "ismaster", Value: true}, {Key: "isWritablePrimary", Value: true},
		{Key: "maxBsonObjectSize", Value: int32(16 * 1024 * 1024)},
		{Key: "maxMessageSizeBytes", Value: int32(48000000)},
		{Key: "maxWriteBatchSize", Value: int32(100000)},
		{Key: "localTime", Value: bson.NewDateTimeFromTime(time.Now())},
		{Key: "logicalSessionTimeoutMinutes", Value: int32(30)},
		{Key: "connectionId", Value: int32(1)},
		{Key: "minWireVersion", Value: int32(0)}, {Key: "maxWireVersion", Value: int32(21)},
		{Key: "readOnly", Value: false}, {Key: "ok", Value: 1.0},
	})
	ok, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1.0}})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveStandalone(c, hello, ok)
		}
	}()
	return ln.Addr().String()
}

func serveStandalone(c net.Conn, hello, ok []byte) {
	defer c.Close()
	for {
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		msg := make([]byte, binary.LittleEndian.Uint32(size[:]))
		copy(msg, size[:])
		if _, err := io.ReadFull(c, msg[4:]); err != nil {
			return
		}
		_, reqID, _, op, rest, _ := wiremessage.ReadHeader(msg)
		var cmd bson.Raw
		switch op {
		case wiremessage.OpQuery:
			_, rest, _ = wiremessage.ReadQueryFlags(rest)
			_, rest, _ = wiremessage.ReadQueryFullCollectionName(rest)
			_, rest, _ = wiremessage.ReadQueryNumberToSkip(rest)
			_, rest, _ = wiremessage.ReadQueryNumberToReturn(rest)
			q, _, _ := wiremessage.ReadQueryQuery(rest)
			cmd = bson.Raw(q)
		case wiremessage.OpMsg:
			if wiremessage.IsMsgMoreToCome(msg) {
				continue
			}
			_, rest, _ = wiremessage.ReadMsgFlags(rest)
			_, rest, _ = wiremessage.ReadMsgSectionType(rest)
			d, _, _ := wiremessage.ReadMsgSectionSingleDocument(rest)
			cmd = bson.Raw(d)
		default:
			return
		}
		reply := ok
		if elems, err := cmd.Elements(); err == nil && len(elems) > 0 {
			switch strings.ToLower(elems[0].Key()) {
			case "hello", "ismaster":
				reply = hello
			}
		}
		var out []byte
		if op == wiremessage.OpQuery {
			idx, b := wiremessage.AppendHeaderStart(nil, wiremessage.NextRequestID(), reqID, wiremessage.OpReply)
			b = wiremessage.AppendReplyFlags(b, 0)
			b = wiremessage.AppendReplyCursorID(b, 0)
			b = wiremessage.AppendReplyStartingFrom(b, 0)
			b = wiremessage.AppendReplyNumberReturned(b, 1)
			b = append(b, reply...)
			out = finish(b, idx)
		} else {
			idx, b := wiremessage.AppendHeaderStart(nil, wiremessage.NextRequestID(), reqID, wiremessage.OpMsg)
			b = wiremessage.AppendMsgFlags(b, 0)
			b = wiremessage.AppendMsgSectionType(b, wiremessage.SingleDocument)
			b = append(b, reply...)
			out = finish(b, idx)
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func finish(b []byte, idx int32) []byte {
	binary.LittleEndian.PutUint32(b[idx:], uint32(len(b)-int(idx)))
	return b
}

func TestCheckRefusesAStandaloneSource(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + standalone(t) + "/?directConnection=true").
		SetServerSelectionTimeout(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(ctx)
	err = replicate.Check(ctx, "articles", c.Database("app").Collection("articles"), p.replica)
	if !errors.Is(err, errs.ErrConfigInvalid) {
		t.Fatalf("want CONFIG_INVALID, got %v", err)
	}
	for _, want := range []string{"standalone", "replica set", "rs.initiate()", "docs/mirror-jobs.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the message does not say %q: %v", want, err)
		}
	}

	t.Run("a standalone replica is fine: it only takes writes", func(t *testing.T) {
		err := replicate.Check(ctx, "articles", p.source, c.Database("copy").Collection("articles"))
		if err != nil {
			t.Fatal(err)
		}
	})
}
