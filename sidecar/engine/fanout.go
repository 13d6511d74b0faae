package engine

// A related change (a document of a collection the job looks up, or a
// relate's namespace) sends again the job's documents that depend on it
// (lookup.Related says which). The follow loop gathers their values as it
// reads the stream, and at each flush hands them to the fan-out reader
// (watermark.Fanout) as tasks, one query each ({field: {$in: values}}).
// The reader reads each task's documents in pages between two marks of its
// chain, and the follow loop sends a page at its mark without the
// documents the stream changed meanwhile (onFanMark). Each document's
// lookups are resolved when its batch is prepared, after the related
// change: it goes out with the new related document (or without a deleted
// one).
//
// No position is recorded while a fan-out is outstanding: a crash before
// its last page is durable replays the related change from an earlier
// position, and with it the fan-out.
