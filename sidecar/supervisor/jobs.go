package supervisor

import (
	"errors"
	"sort"
	"strconv"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// JobDefs turns loaded jobs (a transform Set's, with the environment's
// overrides applied), and the problems loading reported, into the supervisor's job definitions: one per loaded job (Spec
// is the *transform.Job), and one failed definition (Err set) per job whose
// file did not load and that has no earlier version still running, so it
// shows as failed in /status while the others run. A file that failed to
// load while its previous version is loaded sets that job's LoadErr.
// Problems that name no job are returned for the caller to log.
func JobDefs(jobs []*transform.Job, loadErr error) (defs []JobDef, other []error) {
	have := map[string]bool{}
	for _, j := range jobs {
		defs = append(defs, JobDef{Name: j.Name, Kind: j.Kind.String(), Hash: restartKey(j), Spec: j})
		have[j.Name] = true
	}
	for _, err := range flatten(loadErr) {
		var e *errs.Error
		if !errors.As(err, &e) || e.Job == "" {
			other = append(other, err)
			continue
		}
		if have[e.Job] {
			// An edit that broke a running job's file: the previous version
			// keeps running; the supervisor logs the error with the job and
			// shows it in /status as transform_error.
			for i := range defs {
				if defs[i].Name == e.Job {
					defs[i].LoadErr = errors.Join(defs[i].LoadErr, err)
				}
			}
			continue
		}
		have[e.Job] = true
		defs = append(defs, JobDef{Name: e.Job, Err: err})
	}
	sort.Slice(defs, func(a, b int) bool { return defs[a].Name < defs[b].Name })
	return defs, other
}

// flatten unpacks errors.Join trees into their leaves.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// restartKey changes when a loaded job must restart: its Hash (a
// reindex), its settings (applied at start), or its reindex rate (which
// a restart resumes the reindex at).
func restartKey(j *transform.Job) string {
	k := j.Hash + j.SettingsHash
	if j.ReindexRate > 0 {
		k += "/rate=" + strconv.Itoa(j.ReindexRate)
	}
	return k
}
