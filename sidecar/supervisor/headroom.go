package supervisor

import (
	"context"
	"time"
)

// Headroom is one reading of the oplog's window and the jobs' recorded
// positions, from Config.Headroom.
type Headroom struct {
	// Oldest and Newest are the cluster times of the oplog's oldest and
	// newest entries; Newest stands for "now" in cluster time. Both zero
	// when the oplog could not be read (WindowErr says why).
	Oldest, Newest time.Time
	WindowErr      error
	// Positions are the cluster wall times of the jobs' recorded
	// positions (job name -> time), whoever holds them.
	Positions map[string]time.Time
}

// DefaultHeadroomInterval is how often Config.Headroom is read by default.
const DefaultHeadroomInterval = 15 * time.Second

// headroomState is the latest reading and the jobs warned about.
type headroomState struct {
	reading   Headroom
	warned    map[string]bool // jobs whose headroom is under a quarter of the window
	errLogged bool
}

// watchHeadroom reads cfg.Headroom every HeadroomInterval: the window and
// every job's position, so a job that sends nothing (paused, stuck,
// stopped in every pod) still shows its position ageing towards the
// window's end, HISTORY_LOST.
func (s *Supervisor) watchHeadroom() {
	t := time.NewTicker(s.cfg.HeadroomInterval)
	defer t.Stop()
	failing := false
	for {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HeadroomInterval)
		h, err := s.cfg.Headroom(ctx)
		cancel()
		switch {
		case err == nil:
			s.noteHeadroom(h)
			failing = false
		case s.ctx.Err() == nil && !failing:
			// Once per failing streak: MongoDB down is the jobs' to report.
			s.log.Warn("cannot read the jobs' positions for the oplog headroom; trying again", "error", err)
			failing = true
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// noteHeadroom keeps h and logs, once per crossing, a job whose headroom
// fell under a quarter of the window: past it, resuming the job fails
// with HISTORY_LOST and it reindexes (or fails).
func (s *Supervisor) noteHeadroom(h Headroom) {
	s.mu.Lock()
	hr := &s.headroom
	hr.reading = h
	if hr.warned == nil {
		hr.warned = map[string]bool{}
	}
	logErr := h.WindowErr != nil && !hr.errLogged
	hr.errLogged = h.WindowErr != nil
	type warn struct {
		job              string
		headroom, window time.Duration
	}
	var warns []warn
	for job, pos := range h.Positions {
		if _, known := s.jobs[job]; !known || h.WindowErr != nil {
			continue
		}
		window, room := h.Newest.Sub(h.Oldest), pos.Sub(h.Oldest)
		low := room < window/4
		if low && !hr.warned[job] {
			warns = append(warns, warn{job, room, window})
		}
		hr.warned[job] = low
	}
	s.mu.Unlock()
	if logErr {
		s.log.Warn("oplog headroom unknown", "error", h.WindowErr)
	}
	for _, w := range warns {
		s.log.Named(w.job).Warn("oplog headroom under a quarter of the window: once the oplog's oldest entry passes the job's recorded position, the job cannot resume (HISTORY_LOST) and reindexes; resume or fix the job, or grow the oplog",
			"job", w.job, "headroom", w.headroom.Round(time.Second).String(), "oplog_window", w.window.Round(time.Second).String())
	}
}

// headroomOf returns job's position age and headroom in seconds, known
// when both the window and the job's position are.
func (s *Supervisor) headroomOf(job string) (age, room float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.headroom.reading
	pos, have := h.Positions[job]
	if !have || h.WindowErr != nil || h.Newest.IsZero() {
		return 0, 0, false
	}
	return h.Newest.Sub(pos).Seconds(), pos.Sub(h.Oldest).Seconds(), true
}

// OplogWindow returns the oplog's window in seconds, when known
// (status.OplogWindower).
func (s *Supervisor) OplogWindow() (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.headroom.reading
	if h.WindowErr != nil || h.Newest.IsZero() {
		return 0, false
	}
	return h.Newest.Sub(h.Oldest).Seconds(), true
}
