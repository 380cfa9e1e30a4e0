// Command ferry is Ferry's one binary. Its mode is its first argument:
//
//	ferry daemon          on every node (DaemonSet): the CSI node service,
//	                      with --serve-controller the node's CSI controller
//	                      service, the peer service, and on Kubernetes the
//	                      node's lease, fence and takeovers (app/failover)
//	                      and its placement (app/orchestration)
//	ferry controller      a central CSI controller service (csi-sanity,
//	                      the demo)
//	ferry volume-manager  one replica of one volume on one node
//	ferry signer          issues every node its own peer certificate
//	                      (Deployment, the one holder of the peer CA)
//
// Each mode is an fx application assembled from the modules in modules.go,
// each module given its own group of Options; a process has at most one
// Kubernetes client set (kube.go, kubeAPI). `ferry MODE --help` lists its
// flags with their defaults. It wires adapters to the use cases and
// validates flags; the one rule it holds is the replica pod's readiness
// (readyHandler).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/fx"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type mode struct {
	name, summary string
	flags         func(*flag.FlagSet) *Options
	app           func(*Options) fx.Option
}

var modes = []mode{
	{"daemon", "serve the CSI node service on this node (DaemonSet)", daemonFlags, daemonApp},
	{"controller", "serve the CSI controller service (Deployment behind the kubernetes-csi sidecars)", controllerFlags, controllerApp},
	{"volume-manager", "manage one replica of one volume on this node", volumeManagerFlags, volumeManagerApp},
	{"signer", "issue every node its own peer certificate (Deployment; holds the peer CA)", signerFlags, signerApp},
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "ferry %s: node-local ZFS volumes for Kubernetes, replicated between nodes by snapshots.\n\n", version)
	fmt.Fprintf(w, "Usage: ferry MODE [flags]\n\nModes:\n")
	for _, m := range modes {
		fmt.Fprintf(w, "  %-15s %s\n", m.name, m.summary)
	}
	fmt.Fprintf(w, "\nFlags of every mode:\n")
	fs := flag.NewFlagSet("ferry", flag.ContinueOnError)
	commonFlags(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nRun 'ferry MODE --help' for the flags of a mode.\n")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "version", "--version":
		fmt.Fprintln(stdout, version)
		return 0
	}
	for _, m := range modes {
		if m.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("ferry "+m.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		opts := m.flags(fs)
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "Usage: ferry %s [flags]\n\n%s.\n\nFlags:\n", m.name, m.summary)
			fs.PrintDefaults()
		}
		for _, a := range args[1:] {
			if a == "-h" || a == "-help" || a == "--help" {
				fs.SetOutput(stdout)
				fs.Usage()
				return 0
			}
		}
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "ferry %s: unexpected arguments %q\n", m.name, fs.Args())
			return 2
		}
		if err := opts.validate(m.name); err != nil {
			fmt.Fprintf(stderr, "ferry %s: %v\n", m.name, err)
			return 2
		}
		if opts.HostRoot != "" {
			// Every zfs and zpool this process runs inherits it: the
			// image's are cmd/ferry-hosttool, which runs the host's there.
			os.Setenv(hostRootEnv, opts.HostRoot)
		}
		if m.name == "daemon" && opts.NodeLock != "" {
			// Before anything is built or started: the node's other daemon
			// (a surge's old pod) keeps the node until it stopped.
			l, err := acquireNodeLock(opts)
			if err != nil {
				fmt.Fprintf(stderr, "ferry %s: %v\n", m.name, err)
				return 1
			}
			if l == nil {
				return 0 // stopped while waiting
			}
			defer l.Release()
		}
		if m.name == "daemon" {
			ok, err := awaitPool(opts)
			if err != nil {
				fmt.Fprintf(stderr, "ferry %s: %v\n", m.name, err)
				return 1
			}
			if !ok {
				return 0 // stopped while waiting
			}
		}
		var hold stopHold
		options := []fx.Option{m.app(opts)}
		if m.name == "daemon" {
			options = append(options, fx.Populate(&hold))
		}
		app := fx.New(options...)
		return runApp(app, opts.StopTimeout, stderr, hold, signals())
	}
	fmt.Fprintf(stderr, "ferry: unknown mode %q\n\n", args[0])
	usage(stderr)
	return 2
}

// stopHold is what a mode does between SIGTERM and its stop, the whole
// application still running (nil: nothing); since is when the signal
// came; its context ends on a second signal.
type stopHold func(ctx context.Context, since time.Time)

// arrival is a signal and when it came (one during the start waits for
// it: the grace period a hold counts runs from its arrival).
type arrival struct {
	sig os.Signal
	at  time.Time
}

// signals relays SIGTERM and SIGINT from now on, each with its arrival.
func signals() <-chan arrival {
	raw := make(chan os.Signal, 2)
	signal.Notify(raw, syscall.SIGTERM, syscall.SIGINT)
	out := make(chan arrival, 2)
	go func() {
		for s := range raw {
			out <- arrival{sig: s, at: time.Now()}
		}
	}()
	return out
}

// runApp starts the application, waits for a signal on sig (SIGTERM or
// SIGINT), holds (when hold is set; a second signal cuts it short), and
// stops it within stopTimeout: calls in flight finish, sockets are
// removed.
func runApp(app *fx.App, stopTimeout time.Duration, stderr io.Writer, hold stopHold, sig <-chan arrival) int {
	if err := app.Err(); err != nil {
		fmt.Fprintf(stderr, "ferry: %v\n", err)
		return 1
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		fmt.Fprintf(stderr, "ferry: start: %v\n", err)
		return 1
	}
	// fx's own wait listens for the same signals: with a hold, the
	// signals are this function's alone (fx's could win the first one and
	// skip the hold). Nothing in Ferry asks fx to shut down.
	var fxWait <-chan fx.ShutdownSignal
	if hold == nil {
		fxWait = app.Wait()
	}
	var code int
	select {
	case first := <-sig:
		if hold != nil {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-sig:
					cancel()
				case <-ctx.Done():
				}
			}()
			hold(ctx, first.at)
			cancel()
		}
	case s := <-fxWait:
		code = s.ExitCode
	}
	stopCtx, cancel2 := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel2()
	if err := app.Stop(stopCtx); err != nil {
		fmt.Fprintf(stderr, "ferry: stop: %v\n", err)
		return 1
	}
	return code
}
