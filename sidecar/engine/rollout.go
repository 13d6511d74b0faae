package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/transform"
)

// ErrTransformOlder is the cause of the error of a job's run (and of
// Engine.Older) when this process's transform is the one the recorded
// transform replaced and another live process runs the recorded one:
// during a rollout, a pod that still has the old file must not reindex the
// job back to the old output. It is no failure: the supervisor stands the
// job by (lease released, no error counted) until the file updates or no
// live process runs the newer transform (then going back is a revert,
// honoured at once).
var ErrTransformOlder = errors.New("transform older than the one recorded")

// olderRule applies the rollout rule to job, whose position pos records: when
// job's hash is the one the recorded hash replaced (this process has the
// file the recorded transform replaced) and another live process (not
// process, this one) runs the recorded transform (a pod already updated,
// in a rollout), this process must not reindex back to its own: FAILED
// wrapping ErrTransformOlder, naming that process. With no such process (a
// single one whose file was reverted, or an operator's revert that every
// live pod has), going back is what was asked: nil. Another error is a
// failure to read the presence records.
func olderRule(ctx context.Context, store *jobstate.Store, job *transform.Job, pos *jobstate.Position, process string) error {
	if pos == nil || pos.Hash == job.Hash || pos.PreviousHash != job.Hash {
		return nil
	}
	live, err := store.LiveWithHash(ctx, job.Name, pos.Hash, process)
	if err != nil || len(live) == 0 {
		return err
	}
	file := job.File
	if file == "" {
		file = job.Name + " (no file)"
	} else {
		file = filepath.Base(file)
	}
	who := live[0].Process
	if len(live) > 1 {
		who = fmt.Sprintf("%s and %d other processes", who, len(live)-1)
	}
	return errs.Wrap(errs.Failed, job.Name, ErrTransformOlder,
		"this process's transform %s (hash %s) is the one replaced by the recorded transform (hash %s, recorded at %s), which %s runs: standing by until this file updates or no live process runs the newer one",
		file, short(job.Hash), short(pos.Hash), pos.HashSince.UTC().Format(time.RFC3339), who)
}
