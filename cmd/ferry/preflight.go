package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/nodeevents"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/app/preflight"
)

// awaitPool holds the daemon back, before anything is built or started,
// until its pool and parent dataset are usable (app/preflight): a node
// without the pool is a daemon that waits and says why (its log, an event
// on its Node), not a crash loop. false: a SIGTERM or SIGINT came while
// waiting (the daemon stops without having started).
func awaitPool(o *Options) (bool, error) {
	if o.Store != "zfs" {
		return true, nil
	}
	log, err := newLogger(o.LogOptions, o.NodeID, "daemon")
	if err != nil {
		return false, err
	}
	log = log.Named("preflight")
	s, err := zfs.New(zfs.Config{Pool: o.Pool, Parent: o.Parent, Driver: o.DriverName, ZFS: o.ZFSBin, Zpool: o.ZpoolBin, HostRoot: o.HostRoot})
	if err != nil {
		return false, err
	}
	// One zfs call when the pool is there (a daemon replaced during an
	// upgrade starts no later); the daemon's store opens it in full.
	w := preflight.Waiter{Check: s.PoolThere, Log: log, Initial: 2 * time.Second, Max: time.Minute,
		What: fmt.Sprintf("pool %s on node %s", o.Pool, o.NodeID)}
	if o.ClusterState == "kubernetes" {
		if cfg, err := kubeConfig(o.Kubeconfig, "daemon"); err != nil {
			log.Warn("no events on the node while waiting for the pool", zap.Error(err))
		} else if kube, err := kubernetes.NewForConfig(cfg); err == nil {
			events := nodeevents.New(kube, o.NodeID)
			w.Report = func(ctx context.Context, warning bool, reason, message string) {
				if err := events.Record(ctx, warning, reason, message); err != nil {
					log.Warn("the event on the node was not written", zap.String("reason", reason), zap.Error(err))
				}
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := w.Wait(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			log.Info("stopped while waiting for the pool")
			return false, nil
		}
		return false, err
	}
	return true, nil
}
