package transform

import "sync/atomic"

// docSizes learns how large a job's JSON documents are, so that the
// buffers its calls write them into are sized to them (JSONCapacity).
// Such a buffer is held until its batch is durable, and what a reindex
// holds is live heap, which the collector's goal multiplies (GOGC=400: by
// five); a fixed guess either holds room no document uses (an article of
// about 650 bytes of JSON left a sixth of each buffer empty, and a
// document the transform keeps out uses none) or, for larger documents,
// regrows the buffer and leaves the old one as garbage.
type docSizes struct {
	perDoc atomic.Int64 // bytes a document, of the last calls; 0: none yet
}

// guessDocBytes sizes the buffers of a job's first call.
const guessDocBytes = 768

// JSONCapacity is the room to make for the JSON of n documents of the job:
// what its last calls wrote per document, an eighth more.
func (j *Job) JSONCapacity(n int) int {
	per := int64(guessDocBytes)
	if j.sizes != nil {
		if p := j.sizes.perDoc.Load(); p > 0 {
			per = p + p/8
		}
	}
	return n * int(per)
}

// noteJSON takes in a call that wrote size bytes for n documents; one that
// wrote none (all kept out, or a mirror's) says nothing of their size.
// Calls on several runtimes at once may each store theirs: the last one
// stands.
func (j *Job) noteJSON(size, n int) {
	if j.sizes == nil || n == 0 || size == 0 {
		return
	}
	per := int64(max(size/n, 1))
	if old := j.sizes.perDoc.Load(); old > 0 {
		per = (3*old + per) / 4 // one unusual call does not size the next alone
	}
	j.sizes.perDoc.Store(per)
}
