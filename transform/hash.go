package transform

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"reflect"
	"unicode"
	"unicode/utf8"

	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/file"
)

// tokenHashVersion starts what a job's Hash covers. It names the scheme,
// so that a later change of what is hashed is a deliberate new version
// (and one reindex), never an accident.
const tokenHashVersion = "meilistream transform tokens 1\x00"

// tokenHash is the sha256 (hex) of a transform file's meaning as far as a
// tokenizer can tell it: the sequence of its tokens, each written as its
// kind and its exact source text (an identifier, a keyword, a number, a
// string or template part with its quotes and escapes, a regular
// expression literal with its flags, a punctuator), with one mark between
// two tokens that a line break separates. Comments, indentation, spaces
// and blank lines are left out, so editing them does not reindex; a change
// inside a string, a renamed variable or a new line break between two
// tokens does (JavaScript's automatic semicolon insertion can give a line
// break meaning: `return\nx` is not `return x`). A comment that holds a
// line break counts as one, as it does for JavaScript.
//
// regexps gives, by byte offset in src, the length of every regular
// expression literal: only the parser knows whether a '/' divides or
// starts one.
//
// The scheme depends on nothing but the source and the regular
// expressions' positions, so it is the same across runs and versions of
// goja: tokens are split by the rules of the ECMAScript 2023 lexical
// grammar (maximal munch, https://tc39.es/ecma262/#sec-ecmascript-language-lexical-grammar).
// Where this tokenizer could differ from JavaScript's, it only ever keeps
// more apart (two sources that differ in meaning never share a hash; two
// that mean the same may, rarely, not).
//
// Tokens starting inside a range of skip are left out, and so is a ','
// right after one (so that adding a leading property leaves the others'
// tokens as they were).
func tokenHash(src string, regexps map[int]int, skip ...[2]int) string {
	h := sha256.New()
	h.Write([]byte(tokenHashVersion))
	var lenBuf [binary.MaxVarintLen64]byte
	emitted, newline := false, false
	i := 0
	skipped := false // the previous token was left out
	emit := func(kind byte, text string) {
		for _, r := range skip {
			if i >= r[0] && i < r[1] {
				skipped = true
				return
			}
		}
		if skipped && kind == 'p' && text == "," {
			skipped = false
			return
		}
		skipped = false
		if emitted && newline {
			h.Write([]byte{'L'})
		}
		emitted, newline = true, false
		n := binary.PutUvarint(lenBuf[:], uint64(len(text)))
		h.Write([]byte{kind})
		h.Write(lenBuf[:n])
		h.Write([]byte(text))
	}
	// braces says, for each '{' or "${" open, whether it opened a
	// template substitution (the matching '}' resumes the template).
	var braces []bool
	for i < len(src) {
		c := src[i]
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(src[i:])
		}
		switch {
		case isLineTerminator(r):
			newline = true
			i += size
		case isJSSpace(r):
			i += size
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) {
				r, size := utf8.DecodeRuneInString(src[i:])
				if isLineTerminator(r) {
					break
				}
				i += size
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := len(src)
			for k := i + 2; k+1 < len(src); k++ {
				if src[k] == '*' && src[k+1] == '/' {
					end = k + 2
					break
				}
			}
			for _, r := range src[i:end] {
				if isLineTerminator(r) {
					newline = true
				}
			}
			i = end
		case c == '/' && regexps[i] > 0 && i+regexps[i] <= len(src):
			emit('r', src[i:i+regexps[i]])
			i += regexps[i]
		case c == '"' || c == '\'':
			end := scanQuoted(src, i)
			emit('s', src[i:end])
			i = end
		case c == '`':
			end, subst := scanTemplate(src, i+1)
			emit('t', src[i:end])
			if subst {
				braces = append(braces, true)
			}
			i = end
		case c == '}' && len(braces) > 0 && braces[len(braces)-1]:
			braces = braces[:len(braces)-1]
			end, subst := scanTemplate(src, i+1)
			emit('t', src[i:end])
			if subst {
				braces = append(braces, true)
			}
			i = end
		case c == '{':
			braces = append(braces, false)
			emit('p', "{")
			i++
		case c == '}':
			if len(braces) > 0 {
				braces = braces[:len(braces)-1]
			}
			emit('p', "}")
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			end := scanNumber(src, i)
			emit('n', src[i:end])
			i = end
		case isIdentStart(r):
			end := scanWord(src, i)
			emit('w', src[i:end])
			i = end
		default:
			if n := punctuatorLen(src[i:]); n > 0 {
				emit('p', src[i:i+n])
				i += n
				continue
			}
			// Anything else (a stray character the parser accepted in
			// some way this tokenizer does not know) is kept as it is.
			emit('?', src[i:i+size])
			i += size
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// isLineTerminator: LF, CR, LS and PS (ECMAScript "LineTerminator").
func isLineTerminator(r rune) bool {
	return r == '\n' || r == '\r' || r == '\u2028' || r == '\u2029'
}

// isJSSpace: ECMAScript "WhiteSpace": TAB, VT, FF, ZWNBSP and any Space_Separator.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\v', '\f', ' ', '\u00a0', '\ufeff':
		return true
	}
	return r >= utf8.RuneSelf && unicode.Is(unicode.Zs, r)
}

func isIdentStart(r rune) bool {
	return r == '$' || r == '_' || r == '\\' || r == '#' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' ||
		r >= utf8.RuneSelf && r != utf8.RuneError && !isJSSpace(r) && !isLineTerminator(r)
}

func isIdentPart(r rune) bool {
	return isIdentStart(r) && r != '#' || r >= '0' && r <= '9'
}

// scanWord returns the end of the identifier, keyword or private name at
// i; an escape (\u0061) is part of it.
func scanWord(src string, i int) int {
	i++ // the start character ('#', a letter, '\\'...)
	if src[i-1] == '\\' && i < len(src) {
		i++
	}
	for i < len(src) {
		r, size := utf8.DecodeRuneInString(src[i:])
		if !isIdentPart(r) {
			break
		}
		i += size
		if r == '\\' && i < len(src) {
			i++
		}
	}
	return i
}

// scanNumber returns the end of the numeric literal at i: digits, letters
// (0x, 1e5, 10n), '_', '.', and a sign right after the exponent's 'e' of
// a decimal literal.
func scanNumber(src string, i int) int {
	start := i
	hexLike := len(src) > i+1 && src[i] == '0' && (src[i+1]|0x20 == 'x' || src[i+1]|0x20 == 'b' || src[i+1]|0x20 == 'o')
	for i < len(src) {
		c := src[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '.':
			i++
		case (c == '+' || c == '-') && !hexLike && i > start && src[i-1]|0x20 == 'e':
			i++
		default:
			return i
		}
	}
	return i
}

// scanQuoted returns the end of the string literal opened at i.
func scanQuoted(src string, i int) int {
	q := src[i]
	for i++; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case q:
			return i + 1
		}
	}
	return len(src)
}

// scanTemplate scans a template's characters from i (after '`' or the
// '}' that ends a substitution) and returns the end of this part and
// whether it ends with "${" (a substitution follows) rather than '`'.
func scanTemplate(src string, i int) (int, bool) {
	for ; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case '`':
			return i + 1, false
		case '$':
			if i+1 < len(src) && src[i+1] == '{' {
				return i + 2, true
			}
		}
	}
	return len(src), false
}

// punctuators, longest first for each first character (maximal munch).
var punctuators = []string{
	">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=",
	"=>", "==", "!=", "<=", ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "/=", "%=",
	"&=", "|=", "^=", "<<", ">>", "**",
	"{", "}", "(", ")", "[", "]", ".", ";", ",", "<", ">", "+", "-", "*", "/", "%", "&", "|", "^",
	"!", "~", "?", ":", "=", "@",
}

// punctuatorLen is the length of the punctuator s starts with, 0 if none.
func punctuatorLen(s string) int {
	for _, p := range punctuators {
		if len(s) >= len(p) && s[:len(p)] == p {
			// "?." followed by a digit is "?" and a number (a ? .5 : b).
			if p == "?." && len(s) > 2 && s[2] >= '0' && s[2] <= '9' {
				continue
			}
			return len(p)
		}
	}
	return 0
}

var (
	regExpLiteralType = reflect.TypeOf((*ast.RegExpLiteral)(nil))
	fileType          = reflect.TypeOf((*file.File)(nil))
)

// regexpOffsets finds every regular expression literal of prog and
// returns its byte offset in the file (positions minus shift, the bytes of
// the module wrapper before the file) and its length.
func regexpOffsets(prog *ast.Program, shift int) map[int]int {
	out := map[int]int{}
	walkAST(prog, func(v reflect.Value) bool {
		if v.Type() != regExpLiteralType {
			return true
		}
		re := v.Interface().(*ast.RegExpLiteral)
		out[int(re.Idx)-1-shift] = len(re.Literal)
		return false
	})
	return out
}

// settingsRanges returns, as byte ranges of the user's source (shift is
// the wrapper's prefix), the `settings` properties of the object literals
// assigned to module.exports: Meilisearch applies index settings to a live
// index in place, so they are kept out of the hash that says the
// documents must be rebuilt (the job's SettingsHash says they changed).
// Settings built elsewhere (a variable, a function) stay in the hash: a
// change there reindexes, as any other change of the code does. The
// other unhashedKeys are left out alike: they change how fast a reindex
// goes, never a document (a changed value restarts the job, which
// resumes its reindex).
var unhashedKeys = map[string]bool{"settings": true, "reindexRate": true}

func settingsRanges(prog *ast.Program, shift int) [][2]int {
	var out [][2]int
	walkAST(prog, func(v reflect.Value) bool {
		a, ok := v.Interface().(*ast.AssignExpression)
		if !ok || !isModuleExports(a.Left) {
			return true
		}
		if obj, ok := a.Right.(*ast.ObjectLiteral); ok {
			for _, p := range obj.Value {
				if pk, ok := p.(*ast.PropertyKeyed); ok && !pk.Computed && unhashedKeys[propertyName(pk.Key)] {
					out = append(out, [2]int{int(pk.Idx0()) - 1 - shift, int(pk.Idx1()) - 1 - shift})
				}
			}
		}
		return true
	})
	return out
}

// walkAST calls visit with every node of prog reached through a non-nil
// pointer (each once; the file's source map skipped), and walks into the
// node when visit returns true. It walks the tree with its own stack: a
// file may nest deeply.
func walkAST(prog *ast.Program, visit func(reflect.Value) bool) {
	seen := map[uintptr]bool{}
	stack := []reflect.Value{reflect.ValueOf(prog)}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch v.Kind() {
		case reflect.Interface:
			if !v.IsNil() {
				stack = append(stack, v.Elem())
			}
		case reflect.Pointer:
			if v.IsNil() || v.Type() == fileType || seen[v.Pointer()] {
				continue
			}
			seen[v.Pointer()] = true
			if visit(v) {
				stack = append(stack, v.Elem())
			}
		case reflect.Struct:
			for k := 0; k < v.NumField(); k++ {
				if v.Type().Field(k).IsExported() {
					stack = append(stack, v.Field(k))
				}
			}
		case reflect.Slice, reflect.Array:
			for k := 0; k < v.Len(); k++ {
				stack = append(stack, v.Index(k))
			}
		}
	}
}

func isModuleExports(e ast.Expression) bool {
	d, ok := e.(*ast.DotExpression)
	if !ok || d.Identifier.Name != "exports" {
		return false
	}
	id, ok := d.Left.(*ast.Identifier)
	return ok && id.Name == "module"
}

func propertyName(e ast.Expression) string {
	switch k := e.(type) {
	case *ast.StringLiteral:
		return k.Value.String()
	case *ast.Identifier:
		return k.Name.String()
	}
	return ""
}
