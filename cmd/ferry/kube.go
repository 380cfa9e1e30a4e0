package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/eventlog"
	kubeevents "github.com/ferry-csi/ferry/adapters/kube/events"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/adapters/kube/workload"
	"github.com/ferry-csi/ferry/adapters/metrics"
	"github.com/ferry-csi/ferry/adapters/replicactl"
	"github.com/ferry-csi/ferry/app/failover"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// controllerReplication lets the node's controller service replicate
// volumes of factor 2 or more (--replica-template): ReplicatedVolumes,
// replica pods from the template, ReplicaSets and budgets.
func controllerReplication(api *kubeAPI, events ports.EventRecorder) []provision.Option {
	if api == nil || api.workload == nil {
		return nil
	}
	return []provision.Option{provision.WithReplication(provision.Replication{Cluster: api.states, Specs: api.states, Sizes: api.states, Workload: api.workload, Events: events})}
}

// eventRecorder is where a component's events go: with --cluster-state
// kubernetes, Kubernetes Events on the volume's ReplicatedVolume and, with
// claims, on its claim too (the daemon's and the volume managers'
// ServiceAccounts may get claims), besides the log; otherwise the log alone.
// The recorder starts before and stops after whatever fx builds with it.
// Every event is counted in reg (ferry_events_total) first.
func eventRecorder(lc fx.Lifecycle, o *Options, api *kubeAPI, reg *prometheus.Registry, log *zap.Logger, claims bool) (ports.EventRecorder, error) {
	log = log.Named("events")
	if api == nil {
		return metrics.NewEvents(reg, eventlog.Recorder{Log: log}), nil
	}
	r := kubeevents.New(api.kube, api.dyn, log, kubeevents.Options{Host: o.NodeID, Claims: claims})
	lc.Append(fx.Hook{OnStart: r.Start, OnStop: r.Stop})
	return metrics.NewEvents(reg, r), nil
}

// kubeAPI is a process's one Kubernetes client set, with --cluster-state
// kubernetes (nil otherwise), and what is built on it once: the
// ReplicatedVolumes' store and, with --replica-template, the replica
// workload (its pods' namespace in replicas).
type kubeAPI struct {
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	states   *rvstate.Store
	workload *workload.Applier
	replicas string
}

// newKubeAPI builds the process's client set, its user agent naming the
// mode, and loads the replica template once.
// replicaSettings are the daemon's settings every volume manager it runs
// gets from it (workload.Template's fields of one source).
type replicaSettings struct {
	AllowedLag    uint64
	HostRoot      string
	MetricsListen string
}

func newKubeAPI(o KubeOptions, replicaTemplate string, given replicaSettings, mode string) (*kubeAPI, error) {
	if o.ClusterState != "kubernetes" {
		return nil, nil
	}
	cfg, err := kubeConfig(o.Kubeconfig, mode)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := &kubeAPI{kube: kube, dyn: dyn, states: rvstate.New(dyn, nil)}
	if replicaTemplate != "" {
		tpl, err := workload.LoadTemplate(replicaTemplate)
		if err != nil {
			return nil, err
		}
		tpl.AllowedLag = given.AllowedLag // the volume managers count the lag the survivors do
		tpl.HostRoot = given.HostRoot     // and run the host's zfs where the daemon does
		tpl.MetricsListen = given.MetricsListen
		if mode == "daemon" {
			tpl = followDaemon(kube, tpl)
		}
		api.workload, api.replicas = workload.New(kube, dyn, tpl), tpl.Namespace
	}
	return api, nil
}

// nodeReplication lets the node plugin hand replicated volumes over
// (--replica-template with --cluster-state kubernetes): publish and
// unpublish reach this node's volume managers through their control
// sockets in --replica-control-dir.
func nodeReplication(o *Options, api *kubeAPI, lock ports.WriteLock, events ports.EventRecorder, takers *failover.Takers) []publish.Option {
	if api == nil || api.workload == nil || o.ReplicaControl == "" {
		return nil
	}
	r := publish.Replication{
		Cluster:   api.states,
		Control:   replicactl.NewClient(o.ReplicaControl, replica.Node(o.NodeID)),
		Workload:  api.workload,
		Events:    events,
		Wait:      o.HandoverWait,
		WriteLock: lock,
		Sizes:     api.states,
	}
	if takers != nil {
		r.Takers = takers
	}
	return []publish.Option{publish.WithReplication(r)}
}

// daemonTakers are the node's acknowledged takers (failover.Takers) when
// it takes part in node-loss failover (--cluster-state kubernetes with
// --peer-advertise: a lease, a guard and a survivor); nil otherwise.
func daemonTakers(o *Options, api *kubeAPI, log *zap.Logger) *failover.Takers {
	if api == nil || o.PeerAdvertise == "" {
		return nil
	}
	return failover.NewTakers(replica.Node(o.NodeID), api.states, log.Named("takers"))
}

// followDaemon gives the replica pods the daemon's own image, and its
// DaemonSet to roll them by (workload.FollowDaemon), when the daemon
// knows its pod (POD_NAME and POD_NAMESPACE from the downward API) and can
// read it; else the template's image, and no roll.
func followDaemon(kube kubernetes.Interface, tpl workload.Template) workload.Template {
	pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if pod == "" || ns == "" {
		return tpl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := workload.FollowDaemon(ctx, kube, tpl, ns, pod, "ferry")
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry: the replica pods run the template's image %s, and are not rolled: %v\n", tpl.Image, err)
		return tpl
	}
	return t
}
