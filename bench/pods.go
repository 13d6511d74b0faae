package main

// The pods workload (-pods K -cpu-limit C): K sidecar processes on one
// job, as K pods of an application run it, each held to C cores by a
// cgroup of its own, reindex the articles; the same for K = 1 up to K, in
// one run, each trial into its own index and state collection. Reported
// per trial: the wall time until the live index holds every published
// article, documents per second, the sidecars' CPU per document (all K
// together), and what they wrote to MongoDB per document (the test
// MongoDB's serverStatus mongotest.oplog, for the trial's state
// collections). With -against OLD, OLD runs the K = 1 trial beside the
// first binary's, at the same moment, in a cgroup of its own.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// cgroupRoot is the cgroup v1 cpu controller's hierarchy.
const cgroupRoot = "/sys/fs/cgroup/cpu"

// cgroupPeriod is the CFS period the bench's groups use (the kernel's
// default): C cores is a quota of C periods.
const cgroupPeriod = 100 * time.Millisecond

// cpuGroups makes and removes the bench's cpu cgroups, one per sidecar.
type cpuGroups struct {
	cores float64
	why   string // why the sidecars run unlimited; "" when limited (or no limit asked)
	made  []string
}

// newCPUGroups checks that groups of cores cores can be made (root, a
// cgroup v1 cpu controller). When not, why says so and the sidecars run
// unlimited.
func newCPUGroups(cores float64) *cpuGroups {
	g := &cpuGroups{cores: cores}
	if cores <= 0 {
		return g
	}
	probe := filepath.Join(cgroupRoot, fmt.Sprintf("meilistream-bench-%d-probe", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		g.why = fmt.Sprintf("cannot make a cpu cgroup under %s (needs root and a cgroup v1 cpu controller): %v", cgroupRoot, err)
		return g
	}
	defer os.Remove(probe)
	if err := os.WriteFile(filepath.Join(probe, "cpu.cfs_period_us"), []byte(strconv.FormatInt(cgroupPeriod.Microseconds(), 10)), 0o644); err != nil {
		g.why = fmt.Sprintf("cannot set cpu.cfs_period_us in %s: %v", probe, err)
	}
	return g
}

// limited says whether the sidecars run under the CPU limit.
func (g *cpuGroups) limited() bool { return g.cores > 0 && g.why == "" }

// group makes the group of one sidecar and returns its cgroup.procs file,
// or "" when the sidecars run unlimited.
func (g *cpuGroups) group(name string) (string, error) {
	if !g.limited() {
		return "", nil
	}
	dir := filepath.Join(cgroupRoot, fmt.Sprintf("meilistream-bench-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	g.made = append(g.made, dir)
	quota := int64(g.cores * float64(cgroupPeriod.Microseconds()))
	for file, v := range map[string]int64{"cpu.cfs_period_us": cgroupPeriod.Microseconds(), "cpu.cfs_quota_us": quota} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			return "", fmt.Errorf("set %s of %s: %w", file, dir, err)
		}
	}
	return filepath.Join(dir, "cgroup.procs"), nil
}

// throttled sums the groups' cpu.stat: periods in which a sidecar used
// its whole quota and waited, and how long it waited: the proof that the
// limit bit.
func (g *cpuGroups) throttled() (periods int64, waited time.Duration) {
	for _, dir := range g.made {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "nr_throttled":
				periods += n
			case "throttled_time":
				waited += time.Duration(n)
			}
		}
	}
	return periods, waited
}

// close removes the groups (their processes have exited).
func (g *cpuGroups) close() {
	for i := len(g.made) - 1; i >= 0; i-- {
		// A group is removable once its last process is reaped: retry
		// a little while the kernel lets go of it.
		for k := 0; k < 50 && os.Remove(g.made[i]) != nil; k++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
	g.made = nil
}

// podTrial is K sidecars of one binary on one job.
type podTrial struct {
	label string // "new" or "old"
	bin   string
	pods  int
	state string
	runs  []*sidecar
	t0    time.Time
	wall  time.Duration
	cpu   time.Duration
	// What the trial's state collections took in the test MongoDB's
	// history: writes and payload bytes.
	ops, bytes int64
	wrote      bool // known (the test MongoDB)
	// The cgroups' cpu.stat of the trials run together: CFS periods
	// the sidecars were held back in, and for how long.
	throttledPeriods int64
	throttledFor     time.Duration
}

func runPods(ctx context.Context, c config, tmp, transforms string, db *mongo.Database, ms meilisearch.ServiceManager, published int) error {
	if c.pods < 1 {
		return errors.New("-pods needs at least 1")
	}
	groups := newCPUGroups(c.cpuLimit)
	defer groups.close()
	fmt.Printf("pods: 1 to %d sidecar processes on one job reindex %d articles (%d published), transform %s\n", c.pods, c.docs, published, c.transform)
	switch {
	case c.cpuLimit <= 0:
		fmt.Println("cpu limit: none asked (-cpu-limit 0): each sidecar may use every core")
	case groups.limited():
		fmt.Printf("cpu limit: %.2f cores per sidecar (cgroup v1 cpu: cfs_quota_us %d / cfs_period_us %d)\n",
			c.cpuLimit, int64(c.cpuLimit*float64(cgroupPeriod.Microseconds())), cgroupPeriod.Microseconds())
	default:
		fmt.Printf("cpu limit: NOT APPLIED, %s\n  the figures below are NOT comparable with limited runs\n", groups.why)
	}
	fmt.Println("machine load before:", loadavg())
	var done []*podTrial
	for k := 1; k <= c.pods; k++ {
		trials := []*podTrial{{label: "new", bin: c.sidecar, pods: k}}
		if k == 1 && c.against != "" {
			trials = append(trials, &podTrial{label: "old", bin: c.against, pods: 1})
		}
		if err := runPodTrials(ctx, c, tmp, transforms, db, ms, groups, published, trials); err != nil {
			return err
		}
		done = append(done, trials...)
		groups.close()
	}
	printPods(c, done)
	return nil
}

// runPodTrials runs trials side by side until each one's live index holds
// every published article.
func runPodTrials(ctx context.Context, c config, tmp, transforms string, db *mongo.Database, ms meilisearch.ServiceManager, groups *cpuGroups, published int, trials []*podTrial) error {
	before, known := oplogWrites(ctx, db)
	var all []*sidecar
	for _, t := range trials {
		name := fmt.Sprintf("pods%d%s", t.pods, t.label)
		t.state = "meilistream_" + name
		for i := 0; i < t.pods; i++ {
			r := &sidecar{label: fmt.Sprintf("%s/%d", name, i), bin: t.bin, prefix: name + "_", state: t.state}
			r.ready = filepath.Join(tmp, fmt.Sprintf("ready_%s_%d", name, i))
			r.uid = r.prefix + "articles"
			if i == 0 {
				if task, err := ms.DeleteIndex(ctx, r.uid); err == nil {
					ms.WaitForTask(ctx, task.TaskUID, 10*time.Millisecond)
				}
			}
			procs, err := groups.group(fmt.Sprintf("%s-%d", name, i))
			if err != nil {
				return fmt.Errorf("cpu cgroup of sidecar %s: %w", r.label, err)
			}
			if err := r.startIn(ctx, procs, sidecarEnv(c, r, transforms), c.verbose); err != nil {
				return err
			}
			defer r.stop()
			t.runs = append(t.runs, r)
			all = append(all, r)
		}
	}
	fail := func(err error) error {
		var b strings.Builder
		for _, r := range all {
			r.stop()
			fmt.Fprintf(&b, "\nsidecar %s log (tail):\n%s", r.label, tail(r.log(), 2000))
		}
		return fmt.Errorf("%w%s", err, b.String())
	}
	// Each trial counts from when its first sidecar serves HTTP (the
	// processes' start is not the reindex's) until its live index holds
	// every published article (the swap shows them at once).
	err := waitFor(ctx, all, 30*time.Minute, nil, func() (bool, error) {
		over := true
		for _, t := range trials {
			if t.wall > 0 {
				continue
			}
			if t.t0.IsZero() {
				for _, r := range t.runs {
					if b, err := os.ReadFile(r.ready); err == nil && len(b) > 0 {
						t.t0 = time.Now()
						break
					}
				}
			}
			if !t.t0.IsZero() {
				n, err := indexCount(ctx, ms, t.runs[0].uid)
				if err != nil {
					return false, err
				}
				if n == int64(published) {
					t.wall = time.Since(t.t0)
					for _, r := range t.runs {
						t.cpu += cpu(r.pid)
					}
				}
			}
			over = over && t.wall > 0
		}
		return over, nil
	})
	if err != nil {
		return fail(fmt.Errorf("pods reindex: %w", err))
	}
	if groups.limited() {
		for _, t := range trials {
			t.throttledPeriods, t.throttledFor = groups.throttled()
		}
	}
	for _, r := range all {
		r.stop()
	}
	if after, ok := oplogWrites(ctx, db); ok && known {
		for _, t := range trials {
			t.wrote = true
			for ns, w := range after {
				if coll := strings.TrimPrefix(ns, db.Name()+"."); coll == t.state || strings.HasPrefix(coll, t.state+"_") {
					t.ops += w[0] - before[ns][0]
					t.bytes += w[1] - before[ns][1]
				}
			}
		}
	}
	return nil
}

// startIn starts the sidecar in the cgroup whose cgroup.procs file is
// procs ("" none): a shell joins the group, then becomes the sidecar, so
// the Go runtime sees the limit from its first instruction (GOMAXPROCS).
func (r *sidecar) startIn(ctx context.Context, procs string, env []string, verbose bool) error {
	if procs == "" {
		return r.start(ctx, env, verbose)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `echo $$ > "$0" && exec "$1" run`, procs, r.bin)
	return r.startCmd(ctx, cmd, env, verbose)
}

// oplogWrites reads the test MongoDB's writes by namespace (ops, bytes);
// false from a MongoDB that does not count them.
func oplogWrites(ctx context.Context, db *mongo.Database) (map[string][2]int64, bool) {
	var s struct {
		Mongotest *struct {
			Oplog map[string]struct{ Ops, Bytes int64 } `bson:"oplog"`
		} `bson:"mongotest"`
	}
	if err := db.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&s); err != nil || s.Mongotest == nil {
		return nil, false
	}
	out := make(map[string][2]int64, len(s.Mongotest.Oplog))
	for ns, w := range s.Mongotest.Oplog {
		out[ns] = [2]int64{w.Ops, w.Bytes}
	}
	return out, true
}

func printPods(c config, trials []*podTrial) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pods\tbinary\twall\tdocs/s\tspeed-up\tcpu µs/doc\tstate writes/doc\tstate bytes/doc\t")
	var one float64
	for _, t := range trials {
		rate := float64(c.docs) / t.wall.Seconds()
		if t.pods == 1 && t.label == "new" {
			one = rate
		}
		up := "-"
		if one > 0 && t.label == "new" {
			up = fmt.Sprintf("%.2fx", rate/one)
		}
		writes, bytes := "?", "?"
		if t.wrote {
			writes = fmt.Sprintf("%.3f", float64(t.ops)/float64(c.docs))
			bytes = fmt.Sprintf("%.1f", float64(t.bytes)/float64(c.docs))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%s\t%.1f\t%s\t%s\t\n", t.pods, t.label, t.wall.Round(time.Millisecond), rate, up,
			float64(t.cpu.Microseconds())/float64(c.docs), writes, bytes)
	}
	tw.Flush()
	for _, t := range trials {
		if t.throttledPeriods > 0 && t.label == "new" {
			fmt.Printf("pods %d: the cgroups held the sidecars back in %d periods, %s in all\n", t.pods, t.throttledPeriods, t.throttledFor.Round(time.Millisecond))
		}
	}
	for _, t := range trials {
		if t.label == "old" {
			fmt.Printf("against: old is %s, new is %s (K = 1 side by side)\n", c.against, c.sidecar)
		}
	}
	fmt.Println("machine load after:", loadavg())
}
