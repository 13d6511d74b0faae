package main

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/transform"
)

// jobProblem says why job cannot run with this configuration, nil when it
// can: a CONFIG_INVALID naming the job and the setting to fix. These are
// the problems no edit of the job's file alone would show at load: the
// settings it needs are missing, or it would read or write meilistream's
// own state. "meilistream run" refuses to start with any (exit 2); a job
// that meets one on a hot reload fails alone.
func jobProblem(cfg config.Config, job *transform.Job) error {
	state, errColl := cfg.StateCollection, cfg.StateCollection+"_errors"
	switch {
	case job.Kind == jobdef.Search && cfg.MeiliURL == "":
		return &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Setting: "MEILISTREAM_MEILI_URL",
			Msg: "a search job needs MEILISTREAM_MEILI_URL (the Meilisearch its index " + job.Index + " lives in)"}
	case job.Kind == jobdef.Mirror && cfg.ReplicaURI == "":
		return &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Setting: "MEILISTREAM_REPLICA_URI",
			Msg: "a mirror job needs MEILISTREAM_REPLICA_URI (the MongoDB its collection " + job.Mirror + " is copied to)"}
	case (job.Database == "" || job.Database == cfg.MongoDBDatabase) && (job.Collection == state || job.Collection == errColl):
		// The same names in another database are collections like any
		// other: the state collection is the main database's.
		// It would index lease holders and positions, and every position
		// it records would be a change for it to follow: it feeds itself.
		return &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Setting: "MEILISTREAM_STATE_COLLECTION",
			Msg: "the job's collection " + job.Collection + " is meilistream's own state (MEILISTREAM_STATE_COLLECTION is " + state +
				", per-document errors go to " + errColl + "); point the job at another collection, or give meilistream another state collection"}
	case job.Kind == jobdef.Mirror && sameCluster(cfg.MongoDBURI, cfg.ReplicaURI) &&
		(cfg.ReplicaDatabase == cmp.Or(job.Database, cfg.MongoDBDatabase) && job.Mirror == job.Collection ||
			cfg.ReplicaDatabase == cfg.MongoDBDatabase && (job.Mirror == state || job.Mirror == errColl)):
		return &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Setting: "MEILISTREAM_REPLICA_DATABASE",
			Msg: "the job would mirror into " + cfg.ReplicaDatabase + "." + job.Mirror + ", which is its own source or meilistream's state on the same MongoDB; " +
				"give the mirror another collection or MEILISTREAM_REPLICA_DATABASE"}
	}
	return nil
}

// jobProblems is jobProblem of each job, joined; nil when none has one.
func jobProblems(cfg config.Config, jobs []*transform.Job) error {
	var all []error
	for _, j := range jobs {
		if err := jobProblem(cfg, j); err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// sameCluster says whether two MongoDB URIs name the same servers (the
// same hosts, in any order). Different spellings of one host ("localhost"
// and "127.0.0.1") are taken as different: this only guards against the
// obvious mistake.
func sameCluster(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	hosts := func(uri string) []string {
		if strings.HasPrefix(uri, "mongodb+srv://") {
			rest := strings.TrimPrefix(uri, "mongodb+srv://")
			if at := strings.Index(rest, "@"); at >= 0 {
				rest = rest[at+1:]
			}
			h, _, _ := strings.Cut(rest, "/")
			return []string{strings.ToLower(h)}
		}
		cs, err := connstring.Parse(uri)
		if err != nil {
			return nil
		}
		out := make([]string, len(cs.Hosts))
		for i, h := range cs.Hosts {
			out[i] = strings.ToLower(h)
		}
		slices.Sort(out)
		return out
	}
	ha, hb := hosts(a), hosts(b)
	return len(ha) > 0 && slices.Equal(ha, hb)
}

// keyCheckTimeout bounds the start's check of the Meilisearch key.
var keyCheckTimeout = 5 * time.Second

// checkMeiliKey asks Meilisearch, once at start, whether it takes the
// API key, when a search job will need it: a key it refuses (401 or 403)
// can only be fixed by restarting with another, so it is a start-time
// CONFIG_INVALID (exit 2) rather than jobs failing one by one in a process
// that keeps running. A Meilisearch that does not answer is not a
// configuration problem: the jobs retry until it does.
func (w *wiring) checkMeiliKey(ctx context.Context, jobs []*transform.Job, log interface {
	Warn(msg string, args ...any)
}) error {
	if w.meili == nil || !slices.ContainsFunc(jobs, func(j *transform.Job) bool { return j.Kind == jobdef.Search }) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, keyCheckTimeout)
	defer cancel()
	// Listing indexes needs the indexes.get action every search job needs
	// too (it reads its index first); a key limited to some indexes lists
	// those.
	_, err := w.meili.ListIndexes(ctx, &meilisearch.IndexesQuery{Limit: 1})
	var me *meilisearch.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &me) && (me.StatusCode == http.StatusUnauthorized || me.StatusCode == http.StatusForbidden):
		what := "refused the API key"
		if w.cfg.MeiliAPIKey == "" {
			what = "needs an API key and none is set"
		}
		return &errs.Error{Code: errs.ConfigInvalid, Setting: "MEILISTREAM_MEILI_API_KEY",
			Msg: "Meilisearch " + what + " (MEILISTREAM_MEILI_API_KEY or MEILISTREAM_MEILI_API_KEY_FILE): " + string(me.APIError.Code) +
				"; give a key with the indexes.*, documents.*, settings.* and tasks.get actions"}
	default:
		log.Warn("Meilisearch did not answer at start; the search jobs retry until it does", "error", w.scrub.Scrub(redactedErr(err)))
		return nil
	}
}

// probeSource asks the source MongoDB, before the jobs touch it, what it
// can do (capability.Probe), within reachTimeout, and says what that means:
// a source without change streams stops the start (CONFIG_INVALID naming
// the server's answer and what to do) when any job follows a change
// stream; a source without update pipelines or $$NOW expressions gets the
// leases and the job state's records in the form without them, said once.
// A source that does not answer yet is no error: the jobs keep trying, and
// the leases ask the probe again before their first write.
func (w *wiring) probeSource(ctx context.Context, jobs []*transform.Job, log interface {
	Info(string, ...any)
	Warn(string, ...any)
}) error {
	pctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	src, err := w.prober.Source(pctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("cannot ask the source MongoDB what it can do yet; the jobs keep trying, and the probe runs again before the first lease",
				"error", w.scrub.Scrub(redactedErr(err)))
		}
		return nil
	}
	log.Info("source MongoDB", "server", src.Describe(), "change_streams", src.ChangeStreams,
		"update_pipelines", src.UpdatePipelines, "expr_now", src.ExprNow)
	if !src.Pipelines() {
		var answers []string
		for _, r := range src.Refusals {
			if r.Capability != capability.ChangeStreamsCap {
				answers = append(answers, r.Capability+": "+r.String())
			}
		}
		log.Warn("the source MongoDB takes no update pipelines or $$NOW expressions: leases, presence records and requests are written against a reading of the server's clock instead",
			"server", src.Describe(), "answers", strings.Join(answers, "; "))
	}
	return sourceProblem(src, jobs)
}

// sourceProblem says what jobs lack on the source src: a CONFIG_INVALID
// naming the jobs in mode stream, which follow a change stream, when it has
// none (see
// capability.Source.Check); nil when nothing is missing.
func sourceProblem(src capability.Source, jobs []*transform.Job) error {
	var streamJobs []string
	for _, j := range jobs {
		// A scan needs no change stream, and auto scans where there is none.
		if j.Mode != jobdef.ModeStream {
			continue
		}
		streamJobs = append(streamJobs, j.Name)
	}
	if err := src.Check(streamJobs, "MEILISTREAM_MONGODB_URI"); err != nil {
		return errs.New(errs.ConfigInvalid, "", "%s", err)
	}
	return nil
}
