package mongotest

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// failPoint is one of the two fail points this server has, as mongod
// implements them:
//
//   - failCommand (src/mongo/db/commands.cpp evaluateFailCommandFailPoint;
//     the driver specs' "failCommand" test helper), checked before a command
//     runs: mode {times: n} / {skip: n} / alwaysOn / off, data
//     {failCommands, errorCode, errorLabels, closeConnection,
//     blockConnection, blockTimeMS, writeConcernError, appName, namespace}.
//   - failGetMoreAfterCursorCheckout (src/mongo/db/commands/getmore_cmd.cpp),
//     checked by a getMore once it holds its cursor: data {errorCode
//     (default 1 InternalError), appName, namespace}. Its error is labelled
//     as mongod labels a getMore's own errors, knowing the cursor, which is
//     why the change-streams specification's resumability tests use it
//     (SERVER-46091): failCommand fires before the getMore has its cursor,
//     so mongod cannot tell it is a change stream and gives no
//     ResumableChangeStreamError.
type failPoint struct {
	name     string
	always   bool
	times    int64
	skip     int64
	commands map[string]bool
	code     *int32
	labels   []string
	hasLabel bool
	close    bool
	blockMS  int64
	wce      bson.D
	appName  string
	ns       string
}

const (
	fpFailCommand   = "failCommand"
	fpGetMoreFailed = "failGetMoreAfterCursorCheckout"
)

type fpAction struct {
	blockMS   int64
	closeConn bool
	err       error
	wce       bson.D
	// labels, when set, replace the labels mongod would compute for the
	// reply (failCommand's data.errorLabels; errorLabelsOverride in
	// src/mongo/db/error_labels.cpp getErrorLabels).
	labels   []string
	hasLabel bool
}

func failPointName(cmd bson.D) (string, error) {
	if len(cmd) == 0 || cmd[0].Key != "configureFailPoint" {
		return fpFailCommand, nil
	}
	name, _ := cmd[0].Value.(string)
	switch name {
	case fpFailCommand, fpGetMoreFailed:
		return name, nil
	}
	return "", cmdErrf(2, "BadValue", "mongotest supports only the failCommand and failGetMoreAfterCursorCheckout fail points, not %q", name)
}

func cmdConfigureFailPoint(x *cmdCtx) (bson.D, error) {
	if x.db != "admin" {
		return nil, cmdErrf(13, "Unauthorized", "configureFailPoint may only be run against the admin database.")
	}
	name, err := failPointName(x.cmd)
	if err != nil {
		return nil, err
	}
	x.s.fpMu.Lock()
	count := x.s.fpEntered[name]
	x.s.fpMu.Unlock()
	if err := x.s.configureFailPoint(x.cmd); err != nil {
		return nil, err
	}
	// count: the times the fail point was entered until now, as mongod
	// answers (jstests/libs/fail_point_util.js waits for count+n with
	// waitForFailPoint).
	return bson.D{{Key: "count", Value: count}}, nil
}

// cmdWaitForFailPoint: {waitForFailPoint: NAME, timesEntered: N,
// maxTimeMS: M} returns once the fail point was entered N times in all, or
// fails with MaxTimeMSExpired after M ms, as mongod does
// (src/mongo/db/commands/fail_point_cmd.cpp WaitForFailPointCommand).
func cmdWaitForFailPoint(x *cmdCtx) (bson.D, error) {
	if x.db != "admin" {
		return nil, cmdErrf(13, "Unauthorized", "waitForFailPoint may only be run against the admin database.")
	}
	name, _ := x.cmd[0].Value.(string)
	if name != fpFailCommand && name != fpGetMoreFailed {
		return nil, cmdErrf(2, "BadValue", "mongotest supports only the failCommand and failGetMoreAfterCursorCheckout fail points, not %q", name)
	}
	v, ok := x.get("timesEntered")
	want, _ := toInt64(v)
	if !ok {
		return nil, cmdErrf(2, "BadValue", "waitForFailPoint needs timesEntered")
	}
	v, ok = x.get("maxTimeMS")
	ms, _ := toInt64(v)
	if !ok {
		return nil, cmdErrf(2, "BadValue", "waitForFailPoint needs maxTimeMS")
	}
	deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
	for {
		x.s.fpMu.Lock()
		n := x.s.fpEntered[name]
		x.s.fpMu.Unlock()
		if n >= want {
			return bson.D{}, nil
		}
		if time.Now().After(deadline) {
			return nil, cmdErrf(50, "MaxTimeMSExpired", "operation exceeded time limit")
		}
		select {
		case <-x.s.closed:
			return nil, cmdErrf(11600, "InterruptedAtShutdown", "interrupted at shutdown")
		case <-x.c.done:
			return nil, cmdErrf(11601, "Interrupted", "the client disconnected")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *Server) configureFailPoint(cmd bson.D) error {
	name, err := failPointName(cmd)
	if err != nil {
		return err
	}
	fp := &failPoint{name: name, commands: map[string]bool{}}
	mode, _ := docGet(cmd, "mode")
	switch m := mode.(type) {
	case string:
		switch m {
		case "off":
			s.fpMu.Lock()
			delete(s.fps, name)
			s.fpMu.Unlock()
			return nil
		case "alwaysOn":
			fp.always = true
		default:
			return cmdErrf(2, "BadValue", "unknown fail point mode %q", m)
		}
	case bson.D:
		if v, ok := docGet(m, "times"); ok {
			fp.times, _ = toInt64(v)
		} else if v, ok := docGet(m, "skip"); ok {
			fp.skip, _ = toInt64(v)
			fp.always = true
		} else if _, ok := docGet(m, "activationProbability"); ok {
			fp.always = true
		} else {
			return cmdErrf(2, "BadValue", "unknown fail point mode %s", formatValue(m))
		}
	default:
		return cmdErrf(2, "BadValue", "missing fail point mode")
	}
	dv, _ := docGet(cmd, "data")
	data, _ := dv.(bson.D)
	var block bool
	var blockMS int64
	for _, e := range data {
		switch e.Key {
		case "failCommands":
			arr, _ := e.Value.(bson.A)
			for _, a := range arr {
				if n, ok := a.(string); ok {
					fp.commands[n] = true
				}
			}
		case "errorCode":
			c, _ := toInt64(e.Value)
			code := int32(c)
			fp.code = &code
		case "errorLabels":
			fp.hasLabel = true
			arr, _ := e.Value.(bson.A)
			fp.labels = []string{}
			for _, a := range arr {
				if l, ok := a.(string); ok {
					fp.labels = append(fp.labels, l)
				}
			}
		case "closeConnection":
			fp.close = truthy(e.Value)
		case "blockConnection":
			block = truthy(e.Value)
		case "blockTimeMS":
			blockMS, _ = toInt64(e.Value)
		case "writeConcernError":
			fp.wce, _ = e.Value.(bson.D)
		case "appName":
			fp.appName, _ = e.Value.(string)
		case "namespace":
			fp.ns, _ = e.Value.(string)
		}
	}
	if name == fpGetMoreFailed {
		// getmore_cmd.cpp adds failCommands: ["getMore"] to the data and
		// throws errorCode, or InternalError without one; the other
		// failCommand actions do not apply.
		fp.commands = map[string]bool{"getMore": true}
		if fp.code == nil {
			code := int32(1)
			fp.code = &code
		}
		fp.close, block, fp.wce, fp.hasLabel, fp.labels = false, false, nil, false, nil
	}
	if len(fp.commands) == 0 {
		return cmdErrf(2, "BadValue", "failCommand fail point needs data.failCommands")
	}
	if block {
		fp.blockMS = blockMS
	}
	s.fpMu.Lock()
	s.fps[name] = fp
	s.fpMu.Unlock()
	return nil
}

// retriableCodes are the RetriableError category of mongod's
// src/mongo/base/error_codes.yml (the ones a client can see): a retryable
// write failing with one is labelled RetryableWriteError
// (error_labels.cpp isRetryableWriteError).
var retriableCodes = map[int32]bool{6: true, 7: true, 89: true, 91: true, 134: true, 189: true, 262: true, 358: true, 402: true, 9001: true, 10107: true, 11600: true, 11602: true, 13435: true, 13436: true}

// resumableCodes label a change stream's aggregate or getMore error
// ResumableChangeStreamError (error_labels.cpp isResumableChangeStreamError:
// isRetriableError, isNetworkError, isNeedRetargettingError, RetryChangeStream
// 234, FailedToSatisfyReadPreference 133). NeedRetargettingError is 150
// StaleEpoch and 13388 StaleConfig, plus 63 StaleShardVersion in the 7.0
// servers this one claims to be.
func resumableCode(c int32) bool {
	switch c {
	case 63, 150, 13388, 234, 133:
		return true
	}
	return retriableCodes[c]
}

// nonResumableCodes are the NonResumableChangeStreamError category (280
// ChangeStreamFatalError, 286 ChangeStreamHistoryLost): mongod labels them
// on any command (error_labels.cpp isNonResumableChangeStreamError).
func nonResumableCode(c int32) bool { return c == 280 || c == 286 }

// checkFailPoint decides what the named fail point does to this command,
// counting it as entered when it acts.
func (s *Server) checkFailPoint(name string, c *conn, x *cmdCtx) *fpAction {
	s.fpMu.Lock()
	defer s.fpMu.Unlock()
	fp := s.fps[name]
	if fp == nil || !fp.commands[x.name] || x.name == "configureFailPoint" {
		return nil
	}
	// commands.cpp evaluateFailCommandFailPoint activates only with an
	// action of its own; a writeConcernError alone is added after the
	// command ran (service_entry_point_common.cpp _waitForWriteConcern).
	if fp.code == nil && !fp.close && fp.blockMS == 0 && fp.wce == nil {
		return nil
	}
	if fp.appName != "" && fp.appName != c.app {
		return nil
	}
	if fp.ns != "" && fp.ns != x.db+"."+failPointColl(x) {
		return nil
	}
	if fp.skip > 0 {
		fp.skip--
		return nil
	}
	if !fp.always {
		if fp.times <= 0 {
			delete(s.fps, name)
			return nil
		}
		fp.times--
		if fp.times == 0 {
			delete(s.fps, name)
		}
	}
	s.fpEntered[name]++
	a := &fpAction{blockMS: fp.blockMS, closeConn: fp.close, wce: fp.wce, labels: fp.labels, hasLabel: fp.hasLabel}
	if fp.code != nil {
		msg := "Failing command via 'failCommand' failpoint"
		if name == fpGetMoreFailed {
			msg = "Hit the 'failGetMoreAfterCursorCheckout' failpoint"
		}
		a.err = &cmdError{code: *fp.code, name: codeName(*fp.code), msg: msg}
	}
	return a
}

// errorLabels are the labels mongod gives a reply of x that failed with
// code (or nil) and/or carries a write concern error wcCode (or nil):
// src/mongo/db/error_labels.cpp ErrorLabelBuilder::build, for a replica
// set member outside transactions. changeStream says whether mongod knows
// the command to be a change stream's: an aggregate opening one, or a
// getMore that has checked out a change stream's cursor (a failCommand on
// a getMore fires before that, and gets no ResumableChangeStreamError).
func errorLabels(x *cmdCtx, code, wcCode *int32, changeStream bool) []string {
	var labels []string
	_, hasTxn := x.get("txnNumber")
	retryable := func(c *int32) bool { return c != nil && retriableCodes[*c] }
	// isRetryableWriteError: a command with a txnNumber outside a
	// transaction failing, or with a write concern error, of the
	// RetriableError category.
	if hasTxn && retryableWrites[x.name] && (retryable(code) || retryable(wcCode)) {
		return []string{"RetryableWriteError"}
	}
	// isResumableChangeStreamError, then isNonResumableChangeStreamError.
	switch {
	case code != nil && wcCode == nil && changeStream && (x.name == "aggregate" || x.name == "getMore") && resumableCode(*code):
		labels = append(labels, "ResumableChangeStreamError")
	case code != nil && nonResumableCode(*code):
		labels = append(labels, "NonResumableChangeStreamError")
	}
	return labels
}

// failPointColl is the collection of the command's namespace as mongod
// matches data.namespace against it: the invocation's ns()
// (src/mongo/db/commands.cpp CommandHelpers::shouldActivateFailCommandFailPoint
// compares data.namespace with invocation->ns()). For most commands that is
// the collection named by the command's first value; a getMore's first value
// is a cursor id, and its ns() is the database and its "collection" field,
// the cursor's collection (src/mongo/db/commands/getmore_cmd.cpp,
// GetMoreCmd::Invocation::ns: NamespaceStringUtil::deserialize(
// _cmd.getDbName(), _cmd.getCollection())).
func failPointColl(x *cmdCtx) string {
	if x.name == "getMore" {
		return x.str("collection")
	}
	coll, _ := x.cmd[0].Value.(string)
	return coll
}

// opensChangeStream: an aggregate whose first stage is $changeStream.
func opensChangeStream(x *cmdCtx) bool {
	if x.name != "aggregate" {
		return false
	}
	p, _ := x.get("pipeline")
	arr, _ := p.(bson.A)
	if len(arr) > 0 {
		if st, ok := arr[0].(bson.D); ok && len(st) > 0 && st[0].Key == "$changeStream" {
			return true
		}
	}
	return false
}

var codeNames = map[int32]string{
	1: "InternalError", 2: "BadValue", 6: "HostUnreachable", 7: "HostNotFound", 9: "FailedToParse",
	11: "UserNotFound", 13: "Unauthorized", 20: "IllegalOperation", 26: "NamespaceNotFound",
	43: "CursorNotFound", 48: "NamespaceExists", 50: "MaxTimeMSExpired", 59: "CommandNotFound",
	63: "StaleShardVersion", 64: "WriteConcernFailed", 89: "NetworkTimeout", 91: "ShutdownInProgress",
	100: "UnsatisfiableWriteConcern", 112: "WriteConflict", 133: "FailedToSatisfyReadPreference", 136: "CappedPositionLost", 134: "ReadConcernMajorityNotAvailableYet",
	150: "StaleEpoch", 189: "PrimarySteppedDown", 211: "KeyNotFound", 234: "RetryChangeStream",
	251: "NoSuchTransaction", 262: "ExceededTimeLimit", 280: "ChangeStreamFatalError",
	286: "ChangeStreamHistoryLost", 9001: "SocketException", 10107: "NotWritablePrimary",
	11000: "DuplicateKey", 11600: "InterruptedAtShutdown", 11602: "InterruptedDueToReplStateChange",
	13388: "StaleConfig", 13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
}

func codeName(c int32) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "Location" + formatValue(c)
}
