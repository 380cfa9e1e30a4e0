package zfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ferry-csi/ferry/ports"
)

// CommandError is a failed zfs or zpool command, with what it printed on
// stderr. It wraps the ports sentinel its stderr was classified as.
type CommandError struct {
	Args   []string
	Stderr string
	Err    error // the process error (exit status, context cancellation)
	Kind   error // ports.ErrNotFound, ports.ErrExists, ... or nil
}

func (e *CommandError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] // the first line says what failed; the rest is usage
	}
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s: %s", strings.Join(e.Args, " "), msg)
}

// Unwrap exposes both the classification and the process error.
func (e *CommandError) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

// stderrKinds classifies messages seen on zfs-fuse and OpenZFS 2.x. Order
// matters: the first match wins.
var stderrKinds = []struct {
	substr string
	kind   error
}{
	{"Incorrect key provided", ports.ErrKeyRejected}, // load-key: "Key load error: Incorrect key provided for '...'."
	{"dataset does not exist", ports.ErrNotFound},
	{"could not find any snapshots to destroy", ports.ErrNotFound},
	{"no such pool", ports.ErrNotFound},
	{"already exists", ports.ErrExists},
	{"' exists", ports.ErrExists}, // recv: "destination 'pool/x' exists"
	{"out of space", ports.ErrNoSpace},
	{"greater than available space", ports.ErrNoSpace},
	{"no space left", ports.ErrNoSpace},
	{"quota exceeded", ports.ErrNoSpace},
	{"is busy", ports.ErrBusy},
	{"has dependent clones", ports.ErrBusy},
	{"has children", ports.ErrBusy},
	{"must be one of", ports.ErrInvalid},
	{"bad property value", ports.ErrInvalid},
	{"invalid property", ports.ErrInvalid},
	{"less than current used or reserved space", ports.ErrInvalid},
	{"has been modified", ports.ErrConflict},
	{"does not match incremental source", ports.ErrBaseMismatch},
	{"most recent snapshot of", ports.ErrBaseMismatch},
	{"invalid backup stream", ports.ErrInvalid},
}

func classify(stderr string) error {
	for _, k := range stderrKinds {
		if strings.Contains(stderr, k.substr) {
			return k.kind
		}
	}
	return nil
}

// runner runs the zfs CLI.
type runner struct {
	zfsBin   string
	zpoolBin string
	// slots bounds the short commands (listings, creates, destroys,
	// property changes) running at once in this process; streams (send,
	// receive) are not counted. A hundred DeleteVolume calls at once (the
	// provisioner's workers) are a hundred concurrent destroys otherwise,
	// which wedged zfs-fuse here; OpenZFS serialises most of them on its
	// own locks anyway. nil: unbounded.
	slots chan struct{}
	// observe, when set, hears each command's end (Config.Observe).
	observe func(tool, subcommand string, took time.Duration, err error)
	// stuck: the killed commands that have not exited (killWait); nil:
	// none tracked.
	stuck *stuckCommands
}

// done tells observe of a command of bin that started at start.
func (r runner) done(bin string, args []string, start time.Time, err error) {
	if r.observe == nil {
		return
	}
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	r.observe(filepath.Base(bin), sub, time.Since(start), err)
}

// goZFS runs fn, a go-zfs call that runs `zfs sub ...` itself, and tells
// observe of it as of any command.
func (r runner) goZFS(sub string, fn func() error) error {
	start := time.Now()
	err := fn()
	r.done("zfs", []string{sub}, start, err)
	return err
}

// MaxConcurrentCommands is the default bound of runner.slots.
const MaxConcurrentCommands = 4

func commandEnv() []string { return append(os.Environ(), "LC_ALL=C") }

// killWait is how long a command is waited for once it was killed (its
// context done): a zfs process stuck in the kernel (a wedged zfs-fuse, a
// suspended pool) does not die of SIGKILL, and waiting for it held its
// caller, its volume's lock and one of the runner's slots for ever (seen
// here: every later CreateVolume of that volume answered "already in
// progress" for minutes, with no word of why). After killWait the caller
// gets the error (ErrStuck); the process keeps its slot until it exits
// (a goroutine reaps it: at most the runner's slots of them; when all are
// stuck, every command is refused at once), and meanwhile no command that
// changes something on the same dataset starts: it would queue behind
// the stuck one, or run out of order with it, and could undo what a
// caller was told failed (a retried create meeting the stale one, a
// fence's readonly set before a stale inherit). Reads (get, list) and
// commands on other datasets (another volume's fence) still run. This
// holds within one process (each volume manager has its own store): a
// command stuck in the daemon does not stop a volume manager's.
var killWait = 10 * time.Second

// ErrStuck: a zfs command killed when its caller gave up did not exit:
// the pool does not answer.
var ErrStuck = errors.New("the zfs process did not exit when killed: the pool does not answer (zfs-fuse wedged, or the pool suspended)")

// stuckCommands are a runner's killed commands that have not exited, by
// the datasets they name.
type stuckCommands struct {
	mu    sync.Mutex
	on    map[string]stuckCommand
	total int // stuck commands (each holds a slot until it exits)
}

type stuckCommand struct {
	n     int
	what  string
	since time.Time
}

// datasets are the datasets a command's arguments name (a snapshot by
// its dataset): every argument that is no option and no property
// assignment and has a slash.
func datasets(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || strings.Contains(a, "=") || !strings.Contains(a, "/") {
			continue
		}
		ds, _, _ := strings.Cut(a, "@")
		out = append(out, ds)
	}
	return out
}

// readOnly are the subcommands that change nothing: they run whatever is
// stuck (a fence's lookup of a mount must not be refused), order does not
// matter to them.
var readOnly = map[string]bool{"get": true, "list": true}

// refuse answers ErrStuck while a killed command on one of the datasets
// args names has not exited (a subcommand that changes something), or,
// with slots above 0, while that many stuck commands hold every slot (any
// command would only wait for one that may never come).
func (s *stuckCommands) refuse(args []string, slots int) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slots > 0 && s.total >= slots {
		return fmt.Errorf("%w: all %d of this process's zfs command slots are held by killed commands that have not exited", ErrStuck, slots)
	}
	if len(args) > 0 && readOnly[args[0]] {
		return nil
	}
	for _, ds := range datasets(args) {
		if c, ok := s.on[ds]; ok {
			return fmt.Errorf("%w: nothing starts on %s while a killed command on it has not exited (%q, for %s)",
				ErrStuck, ds, c.what, time.Since(c.since).Round(time.Second))
		}
	}
	return nil
}

func (s *stuckCommands) add(bin string, args []string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on == nil {
		s.on = map[string]stuckCommand{}
	}
	s.total++
	what := strings.Join(append([]string{filepath.Base(bin)}, args...), " ")
	for _, ds := range datasets(args) {
		c, ok := s.on[ds]
		if !ok {
			c = stuckCommand{what: what, since: time.Now()}
		}
		c.n++
		s.on[ds] = c
	}
}

func (s *stuckCommands) exited(args []string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	for _, ds := range datasets(args) {
		c := s.on[ds]
		if c.n--; c.n <= 0 {
			delete(s.on, ds)
		} else {
			s.on[ds] = c
		}
	}
}

func (r runner) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = commandEnv()
	dieWithParent(cmd)
	return cmd
}

// zfs runs a zfs subcommand and returns its stdout.
func (r runner) zfs(ctx context.Context, args ...string) ([]byte, error) {
	return r.run(ctx, r.zfsBin, args...)
}

func (r runner) zpool(ctx context.Context, args ...string) ([]byte, error) {
	return r.run(ctx, r.zpoolBin, args...)
}

func (r runner) run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	refused := func(err error) ([]byte, error) {
		return nil, &CommandError{Args: append([]string{bin}, args...), Err: err}
	}
	if err := r.stuck.refuse(args, cap(r.slots)); err != nil {
		return refused(err)
	}
	release := func() {}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			release = func() { <-r.slots }
		case <-ctx.Done():
			return refused(ctx.Err())
		}
		// Again, with the slot: a command on this dataset may have been
		// found stuck while this one waited.
		if err := r.stuck.refuse(args, 0); err != nil {
			release()
			return refused(err)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := r.command(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		release()
		r.done(bin, args, start, err)
		return nil, r.fail(ctx, bin, args, "", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-ctx.Done():
		// Killed by its context (exec.CommandContext); waited for only
		// so long.
		select {
		case err = <-exited:
		case <-time.After(killWait):
			r.stuck.add(bin, args)
			go func() {
				<-exited
				r.stuck.exited(args)
				release()
			}()
			r.done(bin, args, start, ErrStuck)
			return nil, r.fail(ctx, bin, args, "", ErrStuck)
		}
	}
	release()
	r.done(bin, args, start, err)
	if err != nil {
		return nil, r.fail(ctx, bin, args, stderr.String(), err)
	}
	return stdout.Bytes(), nil
}

func (r runner) fail(ctx context.Context, bin string, args []string, stderr string, err error) error {
	kind := classify(stderr)
	if ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return &CommandError{Args: append([]string{bin}, args...), Stderr: stderr, Err: err, Kind: kind}
}

// stream starts a zfs subcommand whose stdout the caller reads. Closing the
// returned reader kills the process if it is still running and reaps it.
func (r runner) stream(ctx context.Context, args ...string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	cmd := r.command(ctx, r.zfsBin, args...)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if f, ok := out.(*os.File); ok {
		growPipe(f)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		r.done(r.zfsBin, args, start, err)
		return nil, r.fail(ctx, r.zfsBin, args, "", err)
	}
	return &commandReader{r: r, ctx: ctx, cancel: cancel, cmd: cmd, out: out, stderr: stderr, args: args, start: start}, nil
}

type commandReader struct {
	r      runner
	ctx    context.Context
	cancel context.CancelFunc
	cmd    *exec.Cmd
	out    io.ReadCloser
	stderr *bytes.Buffer
	args   []string
	eof    bool
	closed bool
	err    error
	start  time.Time
}

// Read returns the command's stdout; at its end it waits for the command and
// reports a failure as the read error, so a stream that ended because zfs
// failed is never mistaken for a complete one.
func (c *commandReader) Read(p []byte) (int, error) {
	if c.eof {
		return 0, c.err
	}
	n, err := c.out.Read(p)
	if errors.Is(err, io.EOF) {
		c.eof = true
		c.err = io.EOF
		werr := c.cmd.Wait()
		c.r.done(c.r.zfsBin, c.args, c.start, werr)
		if werr != nil {
			c.err = c.r.fail(c.ctx, c.r.zfsBin, c.args, c.stderr.String(), werr)
		}
		c.cancel()
		return n, c.err
	}
	return n, err
}

func (c *commandReader) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	if c.eof {
		return nil
	}
	c.cancel() // kills zfs send if it still runs
	_ = c.out.Close()
	c.r.done(c.r.zfsBin, c.args, c.start, errors.Join(errors.New("closed before its end"), c.cmd.Wait()))
	return nil
}
