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
