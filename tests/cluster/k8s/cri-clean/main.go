// Command cri-clean stops and removes every pod sandbox (and so every
// container) a CRI runtime holds, the way the kubelet would: StopPodSandbox
// tears down the pod's network through CNI (its netns under /run/netns, its
// host-local address, the CNI result cache), RemovePodSandbox deletes it.
// cluster-down runs it on each node's containerd after the kubelets stop, so
// nothing of the pods is left behind. (crictl would do; it is not on the
// module proxy.)
//
//	cri-clean -endpoint unix:///var/lib/ferry-e2e/nodes/node1/containerd/containerd.sock
package main

import (
	"context"
	"flag"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "the runtime's CRI socket, unix:///...")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("cri-clean: -endpoint is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("cri-clean: %v", err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		log.Fatalf("cri-clean: list pod sandboxes: %v", err)
	}
	failed := false
	for _, p := range pods.Items {
		name := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			log.Printf("cri-clean: stop %s (%s): %v", name, p.Id, err)
			failed = true
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			log.Printf("cri-clean: remove %s (%s): %v", name, p.Id, err)
			failed = true
			continue
		}
		log.Printf("cri-clean: removed pod %s", name)
	}
	if failed {
		log.Fatal("cri-clean: some pods were not removed")
	}
}
