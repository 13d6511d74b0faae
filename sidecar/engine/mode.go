package engine

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// scanMode says whether job runs in scan mode: its mode is scan, or auto
// on a source without change streams (said once per job and process, at
// warn: the scan sees deletes only at its sweeps).
func (e *Engine) scanMode(ctx context.Context, job *transform.Job, stats *status.JobStats, log hclog.Logger) (bool, error) {
	scan := job.Mode == jobdef.ModeScan
	if job.Mode == jobdef.ModeAuto {
		streams, why, err := SourceStreams(ctx, e.source)
		if err != nil {
			return false, errs.Wrap(errs.Failed, job.Name, err, "mode auto: ask the source whether it has change streams (hello)")
		}
		scan = !streams
		if said, _ := e.modeSaid.Swap(job.Name, scan); said != scan {
			if scan {
				log.Warn(fmt.Sprintf("mode auto: the source has no change streams (%s): scanning %s by %s every %s, deletes found by a sweep every %s (docs/scan-mode.md)",
					why, job.Collection, job.Key, job.ScanInterval, job.SweepInterval), "mode", jobdef.ModeScan)
			} else {
				log.Info("mode auto: the source has change streams ("+why+"): following the change stream", "mode", jobdef.ModeStream)
			}
		}
	}
	mode := jobdef.ModeStream
	if scan {
		mode = jobdef.ModeScan
	}
	stats.Update(func(s *status.JobSnapshot) {
		s.Mode = mode
		if !scan {
			s.Scan = nil
		}
	})
	return scan, nil
}

// SourceStreams says whether the source has change streams, by its hello
// answer: a replica set member names its set (setName), a mongos says
// msg: "isdbgrid"; a standalone mongod says neither and refuses
// $changeStream with 40573 (Location40573, "The $changeStream stage is
// only supported on replica sets"). why names the answer.
func SourceStreams(ctx context.Context, db *mongo.Database) (streams bool, why string, err error) {
	var hello struct {
		SetName string `bson:"setName"`
		Msg     string `bson:"msg"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return false, "", err
	}
	switch {
	case hello.SetName != "":
		return true, fmt.Sprintf("hello names replica set %q", hello.SetName), nil
	case hello.Msg == "isdbgrid":
		return true, "hello says mongos", nil
	}
	return false, "hello names no replica set: a standalone server", nil
}
