package transform

import (
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/dop251/goja"

	"github.com/meilistream/meilistream/internal/errs"
)

// Error texts never carry more of a document or a file than they must.
// A per-document error says what the transform threw (its own message, as
// the user wrote it, cut to maxErrorText) and where; an error while
// loading a file says the kind of error and where only: a *.js file in
// the folder that does not load may not be a transform at all (a mounted
// secret, say), and goja's messages quote the source ("sk_live_... is not
// defined").

// maxErrorText caps a message taken from JavaScript in an error.
const maxErrorText = 1024

// runErr turns an error from running JavaScript into TRANSFORM_FAILED,
// naming the file and the place it was thrown. what is "load" (then no
// message is quoted) or "transform".
func runErr(j *Job, what string, err error) error {
	file := j.file()
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return errs.New(errs.TransformFailed, j.Name, "%s: %s: RangeError: maximum call stack size (%d) exceeded", what, file, maxCallStack)
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		if what == "load" {
			if name := sandboxGlobal(ex); name != "" {
				return errs.New(errs.TransformFailed, j.Name, "%s: %s%s: ReferenceError: %s is not defined (a transform has no %s: it is a pure function of the document)", what, file, exceptionPlace(ex), name, name)
			}
			return errs.New(errs.TransformFailed, j.Name, "%s: %s%s: %s thrown while evaluating the module (its message is not shown: a file that does not load may not be a transform, and its text is never repeated)", what, file, exceptionPlace(ex), exceptionKind(ex))
		}
		return errs.New(errs.TransformFailed, j.Name, "%s: %s: %s", what, file, exceptionText(ex))
	}
	var ie *goja.InterruptedError
	if errors.As(err, &ie) {
		return errs.New(errs.TransformFailed, j.Name, "%s: %s: %s", what, file, clipText(fmt.Sprint(ie.Value()), maxErrorText))
	}
	if what == "load" {
		return errs.New(errs.TransformFailed, j.Name, "%s: %s: %s", what, file, safeSyntaxText(err.Error()))
	}
	return errs.New(errs.TransformFailed, j.Name, "%s: %s: %s", what, file, clipText(err.Error(), maxErrorText))
}

// exceptionText is the thrown value and where it was thrown: "TypeError:
// message (line 3:7)", the message cut to maxErrorText. Reading the value
// runs the transform's code (a getter, a toString); whatever goes wrong
// there leaves "an exception".
func exceptionText(ex *goja.Exception) (text string) {
	defer func() {
		if r := recover(); r != nil {
			if isInterrupt(r) {
				panic(r)
			}
			text = "an exception" + exceptionPlace(ex)
		}
	}()
	msg := ex.Value().String()
	if o, ok := ex.Value().(*goja.Object); ok {
		if m := o.Get("message"); m != nil && !goja.IsUndefined(m) {
			name := o.Get("name")
			if name != nil && !goja.IsUndefined(name) {
				msg = name.String() + ": " + m.String()
			}
		}
	}
	msg = clipText(msg, maxErrorText)
	p, in := exceptionLine(ex), underscoreCalled(ex)
	switch {
	case p != "" && in != "":
		return fmt.Sprintf("%s (line %s, in Underscore's %s)", msg, p, in)
	case p != "":
		return fmt.Sprintf("%s (line %s)", msg, p)
	case in != "":
		return fmt.Sprintf("%s (in Underscore's %s)", msg, in)
	}
	return msg
}

// isInterrupt says r is goja unwinding a call that must stop (an
// interrupt, the call stack limit): never to be swallowed by a recover.
func isInterrupt(r any) bool {
	switch r.(type) {
	case *goja.InterruptedError, *goja.StackOverflowError:
		return true
	}
	return false
}

// exceptionLine is "line:column" of where ex was thrown in the file, ""
// if not in it. Thrown inside the bundled Underscore, it is the line of
// the file that called Underscore: the library's own lines say nothing
// about the script (underscoreCalled names the function).
func exceptionLine(ex *goja.Exception) string {
	for _, f := range ex.Stack() {
		p := f.Position()
		if p.Filename == "" || p.Filename == underscoreFile || strings.HasPrefix(p.Filename, "meilistream:") {
			continue
		}
		col := p.Column
		if p.Line == 1 {
			col -= len(modulePrefix)
		}
		return fmt.Sprintf("%d:%d", p.Line, col)
	}
	return ""
}

// underscoreCalled names the Underscore function the script called when
// ex was thrown inside the library ("_.reduce"), else "": the library's
// frame nearest the script's, since the library calls itself.
func underscoreCalled(ex *goja.Exception) string {
	name := ""
	for _, f := range ex.Stack() {
		p := f.Position()
		switch {
		case p.Filename == underscoreFile:
			if n := underscoreFuncAt(p.Line); n != "" {
				name = n
			}
		case p.Filename == "" || strings.HasPrefix(p.Filename, "meilistream:"):
		default:
			return name // the script's frame: what it called last
		}
	}
	return name
}

// exceptionPlace is ":line:column" after a file name, or "".
func exceptionPlace(ex *goja.Exception) string {
	if p := exceptionLine(ex); p != "" {
		return ":" + p
	}
	return ""
}

// missingGlobals are names a file written for Node.js or a browser uses
// and a transform does not have: saying which one is missing tells no
// secret.
var missingGlobals = map[string]bool{
	"require": true, "process": true, "Buffer": true, "global": true, "window": true, "document": true,
	"__dirname": true, "__filename": true, "setTimeout": true, "setInterval": true, "setImmediate": true,
	"clearTimeout": true, "clearInterval": true, "fetch": true, "XMLHttpRequest": true, "importScripts": true,
}

// sandboxGlobal is the name in ex when it is a ReferenceError for one of
// missingGlobals, else "".
func sandboxGlobal(ex *goja.Exception) (name string) {
	defer func() {
		if r := recover(); r != nil {
			if isInterrupt(r) {
				panic(r)
			}
			name = ""
		}
	}()
	o, ok := ex.Value().(*goja.Object)
	if !ok || o.ClassName() != "Error" || o.Get("name").String() != "ReferenceError" {
		return ""
	}
	n, ok := strings.CutSuffix(o.Get("message").String(), " is not defined")
	if !ok || !missingGlobals[n] {
		return ""
	}
	return n
}

var identifierName = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]{0,63}$`)

// exceptionKind names what was thrown without its message: the error's
// name ("ReferenceError"), or the kind of value.
func exceptionKind(ex *goja.Exception) (kind string) {
	defer func() {
		if r := recover(); r != nil {
			if isInterrupt(r) {
				panic(r)
			}
			kind = "an exception"
		}
	}()
	o, ok := ex.Value().(*goja.Object)
	if !ok {
		return "an exception (" + typeName(ex.Value()) + ")"
	}
	if o.ClassName() == "Error" {
		if n := o.Get("name"); n != nil {
			if s := n.String(); identifierName.MatchString(s) {
				return s
			}
		}
		return "an Error"
	}
	return "an exception (" + typeName(o) + ")"
}

var quoted = regexp.MustCompile(`'[^']*'|"[^"]*"|` + "`[^`]*`")

// safeSyntaxText keeps of a parser's or compiler's message what cannot be
// the file's text: quoted parts (identifiers, labels) become '…', and
// what follows a colon (a regular expression, a number, an escape) goes.
func safeSyntaxText(msg string) string {
	if strings.Contains(msg, "strconv.") {
		return "an invalid number"
	}
	msg = quoted.ReplaceAllString(msg, "'…'")
	if i := strings.IndexAny(msg, ":("); i >= 0 {
		msg = msg[:i]
	}
	return clipText(strings.TrimSpace(msg), 120)
}

// internalErr is a panic that no case expects, from our conversion code
// or from goja: a bug, met on one document. It fails that document with
// TRANSFORM_FAILED (recorded with the other per-document errors; `retry`
// runs it again once fixed) rather than the process, which a restart
// would bring back to the same document to fail again. The stack goes to
// the log, to be reported.
func internalErr(j *Job, r any) error {
	j.opts.Logger.Error("internal error while converting a document; it is recorded as a per-document error: please report this log line",
		"panic", clipText(fmt.Sprint(r), maxErrorText), "stack", string(debug.Stack()))
	return errs.New(errs.TransformFailed, j.Name, "internal error while converting the document (%s): the log has the stack, please report it", clipText(fmt.Sprint(r), 200))
}

// consoleString renders one console argument: strings as they are, other
// values as JSON where possible (like Node's console for plain data), cut
// after maxConsoleLine.
func (v *vm) consoleString(a goja.Value) (s string) {
	defer func() {
		if r := recover(); r != nil {
			if isInterrupt(r) {
				panic(r)
			}
			s = "[unprintable]"
		}
	}()
	if o, ok := a.(*goja.Object); ok {
		if o.ClassName() != "Function" && o.ClassName() != "Error" {
			if js, ok := v.stringifyUpTo(o, maxConsoleLine+1); ok {
				return js
			}
		}
	}
	return clipText(a.String(), maxConsoleLine+1)
}
