// Package mongoerr tells apart the MongoDB driver's errors that the
// packages talking to MongoDB (the supervisor, the replica sink, the
// commands) must handle alike, from the driver's error values, never their
// text.
package mongoerr

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/auth"
)

// mongoAuthFailed is MongoDB's AuthenticationFailed error code.
const mongoAuthFailed = 18

// AuthFailed reports whether err is MongoDB refusing the credentials.
func AuthFailed(err error) bool {
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(mongoAuthFailed) {
		return true
	}
	// A failure of the connection handshake's authentication that carries
	// no server code (the mechanism's own conversation failed) comes as
	// the driver's authentication error inside a connection error.
	var ae *auth.Error
	return errors.As(err, &ae)
}

// HistoryLost reports whether err is a change stream that cannot resume
// because the server's history no longer holds its position:
// ChangeStreamHistoryLost (286), ChangeStreamFatalError (280, what older
// servers answer on resume) or CappedPositionLost (136, the stream overtaken
// by the oplog).
func HistoryLost(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(286) || se.HasErrorCode(280) || se.HasErrorCode(136))
}
