package transform

import (
	"encoding/base64"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The BSON classes' payloads (an ObjectId's hex, a Decimal128's text and
// bits, a Binary's bytes, an opaque value's type and bytes) live in Go,
// in host objects without properties whose prototype is the class's:
// JavaScript reaches them only through the classes' methods. Kept on a
// symbol-keyed property they were one Object.getOwnPropertySymbols away,
// and a transform could have rewritten an opaque value's type and bytes,
// which a mirror writes to the replica as they are.
type (
	oidValue struct{ hex string }
	decValue struct {
		text string
		bits []byte // the exact 16 bytes when from a document (its text may not parse back to them); nil when made in JavaScript
	}
	binValue struct {
		sub  byte
		b64  string
		uuid string // the canonical text of a UUID (subtype 4), else ""
	}
	opaqueValue struct {
		t    bsoncore.Type
		data []byte // a copy
		json string // canonical Extended JSON
	}
)

// hostValue is the DynamicObject of the BSON classes' instances: no
// property of their own, none may be added (a TypeError in strict code).
type hostValue struct{ payload any }

func (h *hostValue) Get(string) goja.Value       { return nil }
func (h *hostValue) Set(string, goja.Value) bool { return false }
func (h *hostValue) Has(string) bool             { return false }
func (h *hostValue) Delete(string) bool          { return true }
func (h *hostValue) Keys() []string              { return nil }
func (v *vm) host(proto *goja.Object, p any) *goja.Object {
	o := v.rt.NewDynamicObject(&hostValue{payload: p})
	_ = o.SetPrototype(proto)
	return o
}

// payload is the Go payload of a BSON class instance, nil for any other
// value (a plain object given a class's prototype included).
func payload(val goja.Value) any {
	o, ok := val.(*goja.Object)
	if !ok {
		return nil
	}
	if h, ok := o.Export().(*hostValue); ok {
		return h.payload
	}
	return nil
}

func (v *vm) newOID(hex string) *goja.Object { return v.host(v.protos.oid, &oidValue{hex: hex}) }

func (v *vm) newDecimal(d bson.Decimal128, bits []byte) *goja.Object {
	return v.host(v.protos.dec, &decValue{text: d.String(), bits: bits})
}

func (v *vm) newBinary(sub byte, data []byte) *goja.Object {
	return v.host(v.protos.bin, &binValue{sub: sub, b64: base64.StdEncoding.EncodeToString(data), uuid: uuidString(sub, data)})
}

func (v *vm) newOpaque(val bsoncore.Value) *goja.Object {
	return v.host(v.protos.opaque, &opaqueValue{t: val.Type, data: append([]byte(nil), val.Data...), json: opaqueJSON(val)})
}

// classHelpers are what the classes' methods in bootstrapSrc call: each
// takes the instance (`this`) and throws a TypeError for anything else.
func (v *vm) classHelpers() *goja.Object {
	rt := v.rt
	h := rt.NewObject()
	wrong := func(what string) { panic(rt.NewTypeError("not " + what)) }
	fn := func(name string, f func(goja.FunctionCall) goja.Value) { _ = h.Set(name, f) }
	fn("newOID", func(c goja.FunctionCall) goja.Value { return v.newOID(c.Argument(0).String()) })
	fn("oidHex", func(c goja.FunctionCall) goja.Value {
		p, ok := payload(c.Argument(0)).(*oidValue)
		if !ok {
			wrong("an ObjectId")
		}
		return rt.ToValue(p.hex)
	})
	fn("newDecimal", func(c goja.FunctionCall) goja.Value {
		return v.host(v.protos.dec, &decValue{text: c.Argument(0).String()})
	})
	fn("decText", func(c goja.FunctionCall) goja.Value {
		p, ok := payload(c.Argument(0)).(*decValue)
		if !ok {
			wrong("a Decimal128")
		}
		return rt.ToValue(p.text)
	})
	bin := func(c goja.FunctionCall) *binValue {
		p, ok := payload(c.Argument(0)).(*binValue)
		if !ok {
			wrong("a Binary")
		}
		return p
	}
	fn("binSubtype", func(c goja.FunctionCall) goja.Value { return rt.ToValue(int64(bin(c).sub)) })
	fn("binBase64", func(c goja.FunctionCall) goja.Value { return rt.ToValue(bin(c).b64) })
	fn("binText", func(c goja.FunctionCall) goja.Value {
		p := bin(c)
		if p.uuid != "" {
			return rt.ToValue(p.uuid)
		}
		return rt.ToValue(p.b64)
	})
	fn("opaqueJSON", func(c goja.FunctionCall) goja.Value {
		p, ok := payload(c.Argument(0)).(*opaqueValue)
		if !ok {
			wrong("a BSONValue")
		}
		return rt.ToValue(p.json)
	})
	return h
}
