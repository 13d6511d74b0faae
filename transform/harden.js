// Guards of the built-ins best guarded in JavaScript, installed in every
// runtime before a transform runs (harden.go). The program's value is this
// function; harden calls it with the limits L: depth, length, string,
// bytes, code.
(function (L) {
"use strict";
var apply = Reflect.apply, construct = Reflect.construct, getProto = Object.getPrototypeOf,
	defineProperty = Object.defineProperty, getOwnDesc = Object.getOwnPropertyDescriptor,
	WM = WeakMap, wmGet = WeakMap.prototype.get, wmSet = WeakMap.prototype.set, P = Proxy,
	RangeErr = RangeError, TypeErr = TypeError, isArray = Array.isArray, ArrayCtor = Array,
	String_ = String, Number_ = Number, max = Math.max, min = Math.min, floor = Math.floor,
	species = Symbol.species, iterator = Symbol.iterator, global = Function("return this")(),
	bufferLength = getOwnDesc(ArrayBuffer.prototype, "byteLength").get;
function def(o, name, f) { defineProperty(o, name, {value: f, writable: true, configurable: true, enumerable: false}); }
function isObject(o) { return o !== null && (typeof o === "object" || typeof o === "function"); }
function toLength(x) { x = Number_(x); if (!(x > 0)) return 0; return min(floor(x), 9007199254740991); }
function toInteger(x) { x = Number_(x); if (x !== x) return 0; if (x === Infinity || x === -Infinity) return x; return x < 0 ? -floor(-x) : floor(x); }

// Chains of proxies and bound functions: every operation on one follows
// the chain down in Go. Their depth is kept, one map for both kinds.
var depth = new WM();
function depthOf(o) { return isObject(o) ? (apply(wmGet, depth, [o]) || 0) : 0; }
function chained(d, what) {
	if (d > L.depth) throw new RangeErr(what + ": a chain of more than " + L.depth + " proxies and bound functions");
	return d;
}
var origRevocable = P.revocable, reflectGet = Reflect.get;
var revocable = function revocable(target, handler) {
	var d = chained(1 + max(depthOf(target), depthOf(handler)), "Proxy.revocable");
	var r = apply(origRevocable, P, [target, handler]);
	apply(wmSet, depth, [r.proxy, d]);
	return r;
};
def(global, "Proxy", new P(P, {
	construct: function (t, args, nt) {
		var d = chained(1 + max(depthOf(args[0]), depthOf(args[1])), "Proxy");
		var p = construct(t, args, nt);
		apply(wmSet, depth, [p, d]);
		return p;
	},
	get: function (t, k, r) { return k === "revocable" ? revocable : reflectGet(t, k, r); },
}));
var origBind = Function.prototype.bind;
def(Function.prototype, "bind", function bind(thisArg) {
	var d = chained(1 + depthOf(this), "bind");
	var b = apply(origBind, this, arguments);
	apply(wmSet, depth, [b, d]);
	return b;
});

// Prototype chains set by these functions (a lookup of a missing key
// follows the chain in Go).
function checkProto(p, what) {
	var n = 0;
	for (var o = p; isObject(o); o = getProto(o)) {
		if (++n > L.depth) throw new RangeErr(what + ": a prototype chain longer than " + L.depth);
	}
}
var origCreate = Object.create, setProto = Object.setPrototypeOf, reflectSetProto = Reflect.setPrototypeOf;
def(Object, "create", function create(proto, properties) {
	checkProto(proto, "Object.create");
	return properties === undefined ? origCreate(proto) : origCreate(proto, properties);
});
def(Object, "setPrototypeOf", function setPrototypeOf(o, proto) {
	checkProto(proto, "Object.setPrototypeOf");
	return setProto(o, proto);
});
def(Reflect, "setPrototypeOf", function setPrototypeOf(o, proto) {
	checkProto(proto, "Reflect.setPrototypeOf");
	return reflectSetProto(o, proto);
});
var protoDesc = getOwnDesc(Object.prototype, "__proto__");
if (protoDesc && protoDesc.set) {
	var protoSet = protoDesc.set;
	defineProperty(Object.prototype, "__proto__", {get: protoDesc.get, set: function __proto__(p) {
		checkProto(p, "__proto__");
		return apply(protoSet, this, [p]);
	}, configurable: true, enumerable: false});
}

// eval and the function constructors parse source, recursively.
function checkCode(args, what) {
	var n = 0;
	for (var i = 0; i < args.length; i++) { args[i] = String_(args[i]); n += args[i].length; }
	if (n > L.code) throw new RangeErr(what + ": more than " + L.code + " characters of source");
	return args;
}
var evalFn = global.eval;
var safeEval = function (x) {
	if (typeof x === "string" && x.length > L.code) throw new RangeErr("eval: more than " + L.code + " characters of source");
	return evalFn(x);
};
defineProperty(safeEval, "name", {value: "eval", configurable: true});
def(global, "eval", safeEval);
// wrap puts a Proxy with traps in front of the constructor C. goja's
// proxies do not answer instanceof (a TypeError), so its
// Symbol.hasInstance is C's own check.
var hasInstance = Symbol.hasInstance, fnHasInstance = Function.prototype[hasInstance];
function wrap(C, traps) {
	var check = function (o) { return apply(fnHasInstance, C, [o]); };
	traps.get = function (t, k, r) { return k === hasInstance ? check : reflectGet(t, k, r); };
	return new P(C, traps);
}
function guardCode(F, what) {
	return wrap(F, {
		apply: function (t, self, args) { return apply(t, self, checkCode(args, what)); },
		construct: function (t, args, nt) { return construct(t, checkCode(args, what), nt); },
	});
}
var SafeFunction = guardCode(Function, "Function");
def(global, "Function", SafeFunction);
def(Function.prototype, "constructor", SafeFunction);
[function* () {}, async function () {}].forEach(function (f) {
	var proto = getProto(f);
	def(proto, "constructor", guardCode(proto.constructor, "Function"));
});

// ArrayBuffers and typed arrays: new Uint8Array(2**33) allocates at once.
function checkBytes(n, what) {
	if (n > L.bytes) throw new RangeErr(what + ": more than " + L.bytes + " bytes");
}
function isBuffer(o) { try { apply(bufferLength, o, []); return true; } catch (e) { return false; } }
function guardBuffer(C, name, size) {
	var G = wrap(C, {construct: function (t, args, nt) {
		var a = args[0];
		if (!isObject(a)) {
			checkBytes(toInteger(a) * size, name);
		} else if (!isBuffer(a)) {
			var it = a[iterator];
			if (it === undefined || it === null) checkBytes(toLength(a.length) * size, name);
		}
		if (size === 1 && name === "ArrayBuffer" && isObject(args[1])) checkBytes(toInteger(args[1].maxByteLength), name);
		return construct(t, args, nt);
	}});
	def(global, name, G);
	def(C.prototype, "constructor", G);
}
guardBuffer(ArrayBuffer, "ArrayBuffer", 1);
[["Int8Array", 1], ["Uint8Array", 1], ["Uint8ClampedArray", 1], ["Int16Array", 2], ["Uint16Array", 2],
 ["Int32Array", 4], ["Uint32Array", 4], ["Float32Array", 4], ["Float64Array", 8],
 ["BigInt64Array", 8], ["BigUint64Array", 8], ["Float16Array", 2]].forEach(function (c) {
	if (typeof global[c[0]] === "function") guardBuffer(global[c[0]], c[0], c[1]);
});
if (typeof ArrayBuffer.prototype.transfer === "function") {
	["transfer", "transferToFixedLength"].forEach(function (name) {
		var f = ArrayBuffer.prototype[name];
		if (typeof f !== "function") return;
		def(ArrayBuffer.prototype, name, function (n) {
			if (n !== undefined) checkBytes(toInteger(n), "ArrayBuffer.prototype." + name);
			return apply(f, this, arguments);
		});
	});
}

// flat and flatMap, in JavaScript: goja's recurse in Go as deep as the
// arrays nest, and loop in Go over holes.
function speciesCreate(o) {
	if (!isArray(o)) return new ArrayCtor(0);
	var C = o.constructor;
	if (isObject(C)) { C = C[species]; if (C === null) C = undefined; }
	if (C === undefined) return new ArrayCtor(0);
	if (typeof C !== "function") throw new TypeErr("object.constructor[Symbol.species] is not a constructor");
	return new C(0);
}
function flattenInto(target, source, sourceLen, start, d, mapper, thisArg, level) {
	if (level > L.depth) throw new RangeErr("Array.prototype.flat: arrays nested more than " + L.depth + " levels");
	if (sourceLen > L.length) throw new RangeErr("Array.prototype.flat: an array longer than " + L.length + " elements");
	var t = start;
	for (var i = 0; i < sourceLen; i++) {
		if (!(i in source)) continue;
		var el = source[i];
		if (mapper !== undefined) el = apply(mapper, thisArg, [el, i, source]);
		if (d > 0 && isArray(el)) {
			t = flattenInto(target, el, toLength(el.length), t, d - 1, undefined, undefined, level + 1);
		} else {
			if (t >= 9007199254740991) throw new TypeErr("Array.prototype.flat: the result is too long");
			defineProperty(target, String_(t), {value: el, writable: true, enumerable: true, configurable: true});
			t++;
		}
	}
	return t;
}
def(ArrayCtor.prototype, "flat", function flat() {
	if (this === null || this === undefined) throw new TypeErr("Array.prototype.flat called on null or undefined");
	var o = Object(this), len = toLength(o.length), d = 1;
	if (arguments.length > 0 && arguments[0] !== undefined) { d = toInteger(arguments[0]); if (d < 0) d = 0; }
	var a = speciesCreate(o);
	flattenInto(a, o, len, 0, d, undefined, undefined, 0);
	return a;
});
def(ArrayCtor.prototype, "flatMap", function flatMap(mapper) {
	if (this === null || this === undefined) throw new TypeErr("Array.prototype.flatMap called on null or undefined");
	var o = Object(this), len = toLength(o.length);
	if (typeof mapper !== "function") throw new TypeErr("Array.prototype.flatMap: the mapper is not a function");
	var a = speciesCreate(o);
	flattenInto(a, o, len, 0, 1, mapper, arguments[1], 0);
	return a;
});
})
