// Command pause is the pod sandbox's process in the local test cluster's
// images (tagged registry.k8s.io/pause:3.6, which the kubelet and containerd
// ask for): it waits for SIGTERM or SIGINT and exits 0. Built static
// (CGO_ENABLED=0) so the image needs nothing else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
