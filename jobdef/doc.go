// Package jobdef is what a job is, apart from the JavaScript that runs it:
// its name, source collection and destination (a Meilisearch index or a
// replica collection), its options with the environment's overrides
// applied, the lookups and relates it declares and how they match, the
// hash that says when it must reindex, and how a source _id becomes a
// destination's document id (IndexID, IDKey) and a document its JSON
// (AppendJSON).
//
// transform loads jobs from their files and holds each definition beside
// its compiled transform (transform.Job embeds a Job); the sinks, the job
// state and the change stream read definitions only, so they do not link
// the JavaScript runtime.
package jobdef
