//go:build !floor

package transform

import "context"

// floorBuild is set in the floor build only (go build -tags floor), where
// a Go function takes the place of goja: see floor.go. The sidecar that
// users run never has it.
const floorBuild = false

func (j *Job) floorEach(context.Context, []byte, []prepared, []Outcome) []byte {
	panic("floorEach outside the floor build")
}
