package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/benchdb"
	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// workload is one pipeline's part of a scenario: its input, how far the
// work is, and the verifier of its effects. Its methods are called from
// one goroutine.
type workload interface {
	// pipeline is the argument of `sluice run`.
	pipeline() string
	// setup produces the input; topics, schema and bucket exist.
	setup(ctx context.Context, sc *scene) error
	// sent is the number of input records setup produced.
	sent() int
	// unit names what progress counts (items, ticks …).
	unit() string
	// progress returns the units of work whose effects are there and the
	// units the input implies, read from the effects themselves; it may
	// fail while a service is down.
	progress(ctx context.Context, sc *scene) (done, want int64, err error)
	// groups maps the (unprefixed) consumer groups whose lag must reach 0
	// to their (unprefixed) topics.
	groups() map[string][]string
	// verify compares the effects with what the input implies, adding a
	// count per kind of effect to r.
	verify(ctx context.Context, sc *scene, r *result) error
}

// memberEnver is a workload whose members need more environment.
type memberEnver interface{ memberEnv(sc *scene) []string }

// stopWatcher is a workload that reads a member's metrics before the
// scenario stops or kills it.
type stopWatcher interface{ beforeStop(m *member) }

// faultAware is a workload that takes part in its fault. The runner calls
// startSide once the members run, with the fault (trades under redis:
// sim calls through the API); injects the fault only once faultReady is
// true, besides 10 % of the work done (trades: under redis, a cached sim
// answer; under minio, a digest written, so that the outage meets digest
// writes); and calls stopSide (idempotent) once every effect is there or
// the scenario ends, before the members stop. The scene's faultBegan and
// faultEnded are set by then.
type faultAware interface {
	startSide(ctx context.Context, sc *scene, fault string) error
	faultReady(ctx context.Context, sc *scene) bool
	stopSide()
}

// scene is one scenario's isolated resources: topics and groups under
// prefix, a PostgreSQL schema, an object-store bucket, and the members.
type scene struct {
	cfg      *config
	id       string // unique per scenario
	name     string // PIPELINE-FAULT-id, the members' log names
	prefix   string // of topics and groups
	schema   string
	dbURL    string // search_path = schema
	bucket   string
	kopts    []kgo.Opt
	cl       *kgo.Client
	adm      *kadm.Client
	db       *pgxpool.Pool
	redis    *redis.Client
	objects  objstore.Store
	members  []*member
	restarts int
	// faultBegan and faultEnded bracket the fault: from just before it was
	// injected until the service was back (up.sh returned) or the killed
	// process was started again.
	faultBegan, faultEnded time.Time
}

// member is one `sluice run` process.
type member struct {
	*faults.Child
	name, metrics string
	ops           string // http://host:port of its ops server (the API)
}

func (sc *scene) topic(name string) string { return sc.prefix + name }
func (sc *scene) group(name string) string { return sc.prefix + name }

// newScene creates the scenario's topics (every catalog topic, prefixed),
// schema (every migration applied) and bucket, and connects to them.
func newScene(ctx context.Context, cfg *config, pipeline, fault string) (*scene, error) {
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	sc := &scene{cfg: cfg, id: id, name: pipeline + "-" + fault + "-" + id, prefix: "chaos-" + id + ".",
		schema: "chaos_" + id, bucket: "chaos-" + id}
	var err error
	if sc.kopts, err = cfg.kc.Opts(); err != nil {
		return nil, err
	}
	if sc.cl, err = kgo.NewClient(sc.kopts...); err != nil {
		return nil, err
	}
	sc.adm = kadm.NewClient(sc.cl)
	if out, err := exec.CommandContext(ctx, cfg.sluice, "topics", "ensure", "--prefix", sc.prefix).CombinedOutput(); err != nil {
		sc.close(ctx)
		return nil, fmt.Errorf("sluice topics ensure: %w: %s", err, out)
	}
	admin, err := pgx.Connect(ctx, cfg.dbURL)
	if err != nil {
		sc.close(ctx)
		return nil, fmt.Errorf("postgres: %w", err)
	}
	sc.dbURL, err = benchdb.FreshSchema(ctx, admin, cfg.dbURL, sc.schema)
	admin.Close(ctx)
	if err != nil {
		sc.close(ctx)
		return nil, err
	}
	if sc.db, err = pgxpool.New(ctx, sc.dbURL); err != nil {
		sc.close(ctx)
		return nil, err
	}
	ro, err := redis.ParseURL(cfg.redisURL)
	if err != nil {
		sc.close(ctx)
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	sc.redis = redis.NewClient(ro)
	if sc.objects, err = objstore.NewS3(ctx, objstore.S3Config{Endpoint: cfg.s3.endpoint, AccessKey: cfg.s3.accessKey,
		SecretKey: cfg.s3.secretKey, Bucket: sc.bucket, Secure: cfg.s3.secure}); err != nil {
		sc.close(ctx)
		return nil, fmt.Errorf("object store: %w", err)
	}
	return sc, nil
}

// close stops the members and drops the scenario's schema, topics and
// groups (the bucket stays, for inspection).
func (sc *scene) close(ctx context.Context) {
	for _, m := range sc.members {
		m.Stop(syscall.SIGTERM)
	}
	if sc.db != nil {
		_, _ = sc.db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{sc.schema}.Sanitize()+" CASCADE")
		sc.db.Close()
	}
	if sc.redis != nil {
		_ = sc.redis.Close()
	}
	if sc.adm != nil {
		if ts, err := sc.adm.ListTopics(ctx); err == nil {
			var mine []string
			for _, t := range ts.Names() {
				if strings.HasPrefix(t, sc.prefix) {
					mine = append(mine, t)
				}
			}
			_, _ = sc.adm.DeleteTopics(ctx, mine...)
		}
		if gs, err := sc.adm.ListGroups(ctx); err == nil {
			var mine []string
			for _, g := range gs.Groups() {
				if strings.HasPrefix(g, sc.prefix) {
					mine = append(mine, g)
				}
			}
			_, _ = sc.adm.DeleteGroups(ctx, mine...)
		}
	}
	if sc.cl != nil {
		sc.cl.Close()
	}
}

// start starts member i of pipeline (`sluice run` on the scene's prefix,
// schema and bucket, an ops server on a free port); its log is
// workdir/<scene>-<i>[-restart].log.
func (sc *scene) start(w workload, i int) (*member, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	name := fmt.Sprintf("%s-%d", sc.name, i)
	if sc.restarts > 0 {
		name += fmt.Sprintf("-r%d", sc.restarts)
	}
	cmd := exec.Command(sc.cfg.sluice, "run", w.pipeline(), "--topic-prefix", sc.prefix, "--group-prefix", sc.prefix, "--ops-addr", addr)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+sc.dbURL, "S3_BUCKET="+sc.bucket)
	if e, ok := w.(memberEnver); ok {
		cmd.Env = append(cmd.Env, e.memberEnv(sc)...)
	}
	c, err := faults.Start(cmd, filepath.Join(sc.cfg.workDir, name+".log"))
	if err != nil {
		return nil, err
	}
	m := &member{Child: c, name: name, metrics: "http://" + addr + "/metrics", ops: "http://" + addr}
	sc.members = append(sc.members, m)
	return m, nil
}

// crashed returns an error naming a member that ended on its own (not
// stopped by the scenario), or nil.
func (sc *scene) crashed(killed *member) error {
	for _, m := range sc.members {
		if m == killed {
			continue
		}
		if done, err := m.Exited(); done {
			return fmt.Errorf("member %s exited on its own (%v); see %s.log", m.name, err, filepath.Join(sc.cfg.workDir, m.name))
		}
	}
	return nil
}

// lag is the sum of the workload's groups' lags.
func (sc *scene) lag(ctx context.Context, w workload) (int64, error) {
	var total int64
	for g, ts := range w.groups() {
		pt := make([]string, len(ts))
		for i, t := range ts {
			pt[i] = sc.topic(t)
		}
		l, err := faults.GroupLag(ctx, sc.adm, sc.group(g), pt...)
		if err != nil {
			return -1, fmt.Errorf("group %s: %w", g, err)
		}
		total += l
	}
	return total, nil
}

// firstInput returns the first topic of w's first group in name order.
func firstInput(w workload) string {
	gs := w.groups()
	names := make([]string, 0, len(gs))
	for g := range gs {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		if ts := gs[g]; len(ts) > 0 {
			return ts[0]
		}
	}
	return ""
}

// minioHold bounds the object store's outage under the minio fault.
const minioHold = 90 * time.Second

// objstoreErrors is the sum over the running members of their
// object-store calls that failed with a transient error
// (sluice_objstore_operations_total).
func (sc *scene) objstoreErrors() float64 {
	var n float64
	for _, m := range sc.members {
		if done, _ := m.Exited(); done {
			continue
		}
		if v, err := faults.ScrapeSum(m.metrics, "sluice_objstore_operations_total", `result="transient_error"`); err == nil {
			n += v
		}
	}
	return n
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runScenario runs one PIPELINE:FAULT scenario (see the package doc).
func runScenario(ctx context.Context, cfg *config, scenario string) (res result) {
	pipeline, fault, _ := strings.Cut(scenario, ":")
	res = result{scenario: scenario}
	start := time.Now()
	defer func() { res.total = time.Since(start) }()
	w := workloads()[pipeline].load(cfg)
	sc, err := newScene(ctx, cfg, pipeline, fault)
	if err != nil {
		res.err = err
		return res
	}
	defer sc.close(context.Background())
	if err := w.setup(ctx, sc); err != nil {
		res.err = fmt.Errorf("setup: %w", err)
		return res
	}
	res.sent, res.unit = w.sent(), w.unit()
	members := 1
	if fault == "kill" {
		members = 2
	}
	for i := range members {
		if _, err := sc.start(w, i); err != nil {
			res.err = err
			return res
		}
	}
	side, _ := w.(faultAware)
	if side != nil {
		if err := side.startSide(ctx, sc, fault); err != nil {
			res.err = fmt.Errorf("side traffic: %w", err)
			return res
		}
		defer side.stopSide()
	}
	deadline := time.Now().Add(cfg.timeout)
	// Wait until 10 % of the work is done (and the side traffic is ready),
	// then inject the fault.
	for {
		done, want, err := w.progress(ctx, sc)
		if err == nil && want > 0 {
			res.doneAtFault, res.pendingAtFault = float64(done)/float64(want), want-done
			if res.doneAtFault >= 0.1 && (side == nil || side.faultReady(ctx, sc)) {
				break
			}
		}
		if err := sc.crashed(nil); err != nil {
			res.err = err
			return res
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			res.err = fmt.Errorf("10 %% of the work not done within %s (%v)", cfg.timeout, err)
			return res
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res.pendingAtFault == 0 {
		res.err = fmt.Errorf("the work was done when the fault began: it would hit nothing (use a larger --scale)")
		return res
	}
	var killed *member
	objBase := sc.objstoreErrors()
	sc.faultBegan = time.Now()
	switch fault {
	case "kill":
		killed = sc.members[1]
		logf("%s: kill -9 of member %s", scenario, killed.name)
		if sw, ok := w.(stopWatcher); ok {
			sw.beforeStop(killed)
		}
		killed.Stop(syscall.SIGKILL)
		time.Sleep(2 * time.Second)
		sc.restarts++
		if _, err := sc.start(w, 1); err != nil {
			res.err = err
			return res
		}
	case "minio":
		// Down for 5 s and until an object-store call of a member has
		// failed (at most minioHold): a pipeline that writes its objects
		// in bursts (trades' digests, every 10 s once due) may make none
		// in 5 s.
		logf("%s: stopping minio for 5 s and until an object-store call fails", scenario)
		if err := cfg.stack.Run("down.sh", "minio"); err != nil {
			res.err = err
			return res
		}
		down := time.Now()
		for time.Since(down) < 5*time.Second || sc.objstoreErrors() <= objBase && time.Since(down) < minioHold {
			time.Sleep(200 * time.Millisecond)
		}
		res.note("the object store was down %.1f s", time.Since(down).Seconds())
		if err := cfg.stack.Run("up.sh", "minio"); err != nil {
			res.err = err
			return res
		}
	case "leader":
		// The leader of partition 0 of the first input topic (of the
		// groups in name order), killed with kill -9; the cluster goes on
		// with two nodes and the node is started again after recovery.
		topic := sc.topic(firstInput(w))
		node, err := faults.KillLeader(ctx, sc.adm, topic)
		if err != nil {
			res.err = err
			return res
		}
		logf("%s: kill -9 of broker %d, the leader of %s/0", scenario, node, topic)
		defer func() {
			logf("%s: starting the killed broker again", scenario)
			if err := cfg.stack.Run("up.sh", "kafka"); err != nil {
				res.err = errors.Join(res.err, err)
			}
		}()
	default:
		svc, ok := faults.ServiceOf(fault)
		if !ok {
			res.err = fmt.Errorf("unknown fault %q", fault)
			return res
		}
		logf("%s: stopping %s for 5 s", scenario, svc)
		if err := cfg.stack.Restart(svc, 5*time.Second); err != nil {
			res.err = err
			return res
		}
	}
	faultOver := time.Now()
	sc.faultEnded = faultOver
	for {
		done, want, err := w.progress(ctx, sc)
		if err == nil && done >= want {
			lag, lerr := sc.lag(ctx, w)
			if lerr == nil && lag == 0 {
				break
			}
			err = lerr
			if err == nil {
				err = fmt.Errorf("lag %d", lag)
			}
		} else if err == nil {
			err = fmt.Errorf("%d of %d done", done, want)
		}
		if cerr := sc.crashed(killed); cerr != nil {
			res.err = cerr
			return res
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			// Verify all the same: the report says what is missing.
			res.err = fmt.Errorf("not recovered within %s: %v", cfg.timeout, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.recovery = time.Since(faultOver)
	if side != nil {
		side.stopSide()
	}
	// The object-store calls that failed (a minio fault that met none hit
	// nothing).
	objErrors := sc.objstoreErrors() - objBase
	for _, m := range sc.members {
		if done, _ := m.Exited(); done {
			continue
		}
		// The limiter held an account's grants after finding its Redis
		// state lost (restart without persistence, lost writes).
		if v, err := faults.ScrapeSum(m.metrics, "sluice_ratelimit_state_lost_total", ""); err == nil && v > 0 {
			res.note("member %s: sluice_ratelimit_state_lost_total %g (the limiter held an account's grants for its longest window)", m.name, v)
		}
		if sw, ok := w.(stopWatcher); ok {
			sw.beforeStop(m)
		}
		m.Stop(syscall.SIGTERM)
	}
	if fault == "minio" {
		if objErrors == 0 {
			res.err = errors.Join(res.err, errors.New("no object-store call failed: the outage hit nothing"))
		}
		res.note("%g object-store calls failed with a transient error (sluice_objstore_operations_total)", objErrors)
	}
	if err := w.verify(ctx, sc, &res); err != nil {
		res.err = errors.Join(res.err, fmt.Errorf("verify: %w", err))
	}
	return res
}
