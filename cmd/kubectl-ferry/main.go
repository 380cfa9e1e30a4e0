// Command kubectl-ferry is Ferry's kubectl plugin (on PATH, `kubectl
// ferry`): what an operator asks of Ferry's volumes, read from the
// cluster with the operator's own kubeconfig.
//
//	kubectl ferry status     every volume: its claim, copies and where, the
//	                         primary, the newest snapshot, the worst lag,
//	                         and each transfer under way with a bar
//	kubectl ferry describe VOLUME|CLAIM
//	                         one volume: its claim, spec, copies (role,
//	                         snapshot, readiness, lag, transfer) and the
//	                         newest events on it and on its claim
//	kubectl ferry dashboard  serves a status page on 127.0.0.1:8089: the
//	                         volumes, their copies per node, lag, transfers
//	                         with progress bars, recent failovers and fences
//	kubectl ferry fenced     the copies kept aside on every node (fenced
//	                         writes a takeover gave up); `fenced inspect NODE
//	                         NAME` says how to look at one, `fenced drop NODE
//	                         NAME` destroys it once its name is typed back
//	kubectl ferry doctor     checks Ferry on the cluster: its CRD, CSIDriver
//	                         and admission policies, the node daemons (ready,
//	                         one version), each node's pool (read, free
//	                         space), the peer certificates' expiry, and the
//	                         volumes' phases; exit status 1 on a failure
//	kubectl ferry version    this plugin's version
//
// Transfers are read from the volume managers' metrics through the API
// server's pod proxy. It needs: list ReplicatedVolumes (cluster-wide),
// list pods and get pods/proxy in Ferry's namespace; without the last two
// the status says so and lists the volumes alone.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/volume"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// metricsPort is the volume managers' metrics port when their pod's
// prometheus.io/port annotation does not say (deploy/: the daemon's
// --replica-metrics-listen).
const metricsPort = "9809"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// stdin is where `fenced drop` reads the operator's confirmation.
var stdin io.Reader = os.Stdin

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubectl-ferry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	kubeContext := fs.String("context", "", "the kubeconfig context (default: its current one)")
	namespace := fs.String("ferry-namespace", "ferry-system", "the namespace Ferry runs in")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kubectl ferry [flags] status|doctor|version\n       kubectl ferry [flags] describe [-n NAMESPACE] VOLUME|CLAIM|NAMESPACE/CLAIM\n       kubectl ferry [flags] dashboard [--listen 127.0.0.1:8089] [--public]\n       kubectl ferry [flags] fenced [inspect NODE NAME | drop [--yes] NODE NAME]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cmd := fs.Arg(0)
	var claimNS, target, listen string
	var public, yes bool
	var fencedArgs []string
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "kubectl-ferry", version)
		return 0
	case "status", "doctor":
	case "dashboard":
		sub := flag.NewFlagSet("dashboard", flag.ContinueOnError)
		sub.SetOutput(stderr)
		sub.StringVar(&listen, "listen", "127.0.0.1:8089", "where to serve the status page")
		sub.BoolVar(&public, "public", false, "allow a --listen address that is not loopback")
		if err := sub.Parse(fs.Args()[1:]); err != nil || sub.NArg() != 0 {
			fs.Usage()
			return 2
		}
	case "fenced":
		sub := flag.NewFlagSet("fenced", flag.ContinueOnError)
		sub.SetOutput(stderr)
		if err := sub.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
		fencedArgs = sub.Args()
		if len(fencedArgs) > 0 && fencedArgs[0] == "drop" {
			drop := flag.NewFlagSet("drop", flag.ContinueOnError)
			drop.SetOutput(stderr)
			drop.BoolVar(&yes, "yes", false, "drop without asking for the copy's name")
			if err := drop.Parse(fencedArgs[1:]); err != nil {
				return 2
			}
			fencedArgs = append([]string{"drop"}, drop.Args()...)
		}
		switch {
		case len(fencedArgs) == 0:
		case (fencedArgs[0] == "inspect" || fencedArgs[0] == "drop") && len(fencedArgs) == 3:
		default:
			fs.Usage()
			return 2
		}
	case "describe":
		sub := flag.NewFlagSet("describe", flag.ContinueOnError)
		sub.SetOutput(stderr)
		sub.StringVar(&claimNS, "n", "", "the claim's namespace (then name the claim alone)")
		sub.StringVar(&claimNS, "namespace", "", "the claim's namespace (then name the claim alone)")
		if err := sub.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
		if sub.NArg() != 1 {
			fs.Usage()
			return 2
		}
		target = sub.Arg(0)
	default:
		fs.Usage()
		return 2
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
		return 1
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
		return 1
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
		return 1
	}
	if cmd == "dashboard" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := serveDashboard(ctx, listen, public, dashboardHandler(kube, dyn, *namespace, time.Now), stdout); err != nil {
			fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
			return 1
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if cmd == "fenced" {
		env := fencedEnv{kube: kube, ns: *namespace, get: proxyGet(kube), exec: podExec(cfg, kube)}
		nodes, err := env.listKept(ctx)
		if err == nil {
			switch {
			case len(fencedArgs) == 0:
				writeKept(stdout, nodes, time.Now())
			case fencedArgs[0] == "inspect":
				err = inspect(nodes, fencedArgs[1], fencedArgs[2], stdout)
			default:
				err = env.drop(ctx, nodes, fencedArgs[1], fencedArgs[2], yes, stdin, stdout)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
			return 1
		}
		return 0
	}
	if cmd == "describe" {
		rv, err := findVolume(ctx, dyn, target, claimNS)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
			return 1
		}
		if err := writeDescription(stdout, describe(ctx, kube, rv, *namespace, proxyScrape(kube)), time.Now()); err != nil {
			return 1
		}
		return 0
	}
	if cmd == "doctor" {
		fs := doctor(ctx, doctorEnv{kube: kube, dyn: dyn, ns: *namespace, now: time.Now(), version: version, scrape: proxyScrape(kube)})
		if !writeDoctor(stdout, fs) {
			return 1
		}
		return 0
	}
	rows, warnings, err := status(ctx, kube, dyn, *namespace)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl ferry: %v\n", err)
		return 1
	}
	if err := writeStatus(stdout, rows); err != nil {
		return 1
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "kubectl ferry: %s\n", w)
	}
	return 0
}

// status reads every ReplicatedVolume and, from its replica pods'
// metrics, the transfers under way. A pod whose metrics cannot be read
// (not reachable, no permission) costs its transfer only, within
// scrapeTimeout.
func status(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, ns string) ([]volumeRow, []string, error) {
	list, err := dyn.Resource(rvapi.GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list ReplicatedVolumes (is Ferry installed? may you list them?): %w", err)
	}
	var warnings []string
	podsOf := map[string][]corev1.Pod{} // by the volume label's value
	if pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: rvapi.LabelVolume}); err != nil {
		warnings = append(warnings, fmt.Sprintf("the replica pods in %s could not be listed (%v): transfers are not shown", ns, err))
	} else {
		for _, p := range pods.Items {
			podsOf[p.Labels[rvapi.LabelVolume]] = append(podsOf[p.Labels[rvapi.LabelVolume]], p)
		}
	}
	var rows []volumeRow
	var unreadable []string
	for _, item := range list.Items {
		b, err := item.MarshalJSON()
		if err != nil {
			return nil, nil, err
		}
		var rv rvapi.ReplicatedVolume
		if err := json.Unmarshal(b, &rv); err != nil {
			return nil, nil, fmt.Errorf("ReplicatedVolume %s: %w", item.GetName(), err)
		}
		row := volumeRow{rv: rv, transfers: map[string]transfer{}}
		for _, p := range podsOf[rvapi.Hash(volume.ID(volumeID(rv)))] {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			port := metricsPort
			if v := p.Annotations["prometheus.io/port"]; v != "" {
				port = v
			} else if p.Annotations["prometheus.io/scrape"] == "" {
				continue // a volume manager without metrics (made by an earlier release)
			}
			body, err := proxyScrape(kube)(ctx, p, port)
			if err != nil {
				unreadable = append(unreadable, fmt.Sprintf("%s (%v)", p.Name, err))
				continue
			}
			m := parseMetrics(body)
			if t, ok := transferOf(m); ok {
				row.transfers[p.Spec.NodeName] = t
			}
			if v, ok := first(m, "ferry_replica_lag_seconds"); ok && (row.lag == nil || v > *row.lag) {
				row.lag = &v
			}
		}
		rows = append(rows, row)
	}
	if len(unreadable) > 0 {
		warnings = append(warnings, fmt.Sprintf("the metrics of %d replica pods could not be read through the API server's pod proxy, so their transfers are not shown: %s", len(unreadable), strings.Join(unreadable, "; ")))
	}
	return rows, warnings, nil
}

// scrapeTimeout bounds the read of one process's metrics.
const scrapeTimeout = 5 * time.Second

// proxyScrape reads a pod's metrics through the API server's pod proxy
// (get pods/proxy), within scrapeTimeout.
func proxyScrape(kube kubernetes.Interface) func(ctx context.Context, p corev1.Pod, port string) (string, error) {
	return func(ctx context.Context, p corev1.Pod, port string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		defer cancel()
		body, err := kube.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, port, "metrics", nil).DoRaw(ctx)
		return string(body), err
	}
}

// volumeID is the volume's CSI ID (the object's name when it is one).
func volumeID(rv rvapi.ReplicatedVolume) string {
	if rv.Spec.VolumeID != "" {
		return rv.Spec.VolumeID
	}
	return rv.Name
}

// transferOf reads a volume manager's metrics (the text exposition
// format): the transfer under way, if ferry_transfer_running says one is.
func transferOf(m map[string][]sample) (transfer, bool) {
	v := func(name string) float64 { x, _ := first(m, name); return x }
	if v("ferry_transfer_running") != 1 {
		return transfer{}, false
	}
	return transfer{Bytes: int64(v("ferry_transfer_bytes")), Estimated: int64(v("ferry_transfer_estimated_bytes")),
		ETA: time.Duration(v("ferry_transfer_eta_seconds") * float64(time.Second))}, true
}
