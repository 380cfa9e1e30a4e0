// Package kubeapi starts a real etcd and kube-apiserver (the cluster's
// pinned release, built by `make cluster-bins`) on loopback for one test
// binary, with Ferry's CRDs installed: the Kubernetes adapters run their
// contracts against the real API server's semantics (resourceVersion
// conflicts, the status subresource, schema pruning and validation)
// without a cluster, kubelets or Ferry's pods reacting to what they write.
//
// Authorization is AlwaysAllow, for one static token on 127.0.0.1: the
// server lives as long as the test and serves nobody else. A test of
// roles starts its own server with RBAC (Options.RBAC).
package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// K8sVersion is the release of tests/cluster/versions.sh.
const K8sVersion = "v1.37.2"

// BinDir is where `make cluster-bins` puts etcd and kube-apiserver:
// $FERRY_K8S_BIN, else ~/.cache/ferry/k8s-<version>.
func BinDir() string {
	if d := os.Getenv("FERRY_K8S_BIN"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "ferry", "k8s-"+K8sVersion)
}

// testToken authenticates the tests' admin (Config carries it).
const testToken = "ferry-kubeapi-test-token"

// Server is a running etcd and API server.
type Server struct {
	// Config reaches the API server as an admin allowed everything,
	// without client-side rate limits.
	Config *rest.Config
	dir    string
	procs  []*proc
}

type proc struct {
	name, log string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// Options are how a server is started.
type Options struct {
	// RBAC authorizes requests by RBAC (its bootstrap roles and the ones
	// a test creates) instead of AlwaysAllow; the tests' admin, in
	// system:masters, may still do everything.
	RBAC bool
}

// Start runs etcd and kube-apiserver until the test ends. It fails the
// test (never skips it) when the binaries are missing: CI builds them.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	s, err := NewWith(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.Logs())
		}
		s.Stop()
	})
	return s
}

// New runs etcd and kube-apiserver with their data in dir until Stop; for
// a TestMain that shares one server between tests.
func New(dir string) (*Server, error) { return NewWith(dir, Options{}) }

// NewWith is New with options.
func NewWith(dir string, o Options) (*Server, error) {
	bin := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s (run `make cluster-bins`, or set FERRY_K8S_BIN): %w", b, bin, err)
		}
	}
	s := &Server{dir: dir}
	saKey := filepath.Join(dir, "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return nil, err
	}
	// One static token for the tests' admin: anonymous requests are refused
	// when authorization is AlwaysAllow.
	authz := "AlwaysAllow"
	if o.RBAC {
		authz = "RBAC"
	}
	token := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(token, []byte(testToken+",ferry-test-admin,ferry-test-admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := s.run("etcd", filepath.Join(bin, "etcd"),
		"--name", "kubeapi-test", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "kubeapi-test="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}
	if err := s.run("kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[2]),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-key-file", saKey, "--service-account-signing-key-file", saKey,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--authorization-mode", authz, "--token-auth-file", token,
		// No Service endpoints for a loopback address (and none are needed).
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true", "--profiling=false", "--v=1"); err != nil {
		s.Stop()
		return nil, err
	}
	s.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(ports[2]),
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		BearerToken:     testToken,
		QPS:             -1, // no client-side throttling: the tests measure the server
		Timeout:         30 * time.Second,
	}
	kube, err := kubernetes.NewForConfig(s.Config)
	if err == nil {
		err = s.waitFor("the API server to answer /readyz", 2*time.Minute, func(ctx context.Context) error {
			body, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(body)) != "ok" {
				return fmt.Errorf("readyz: %s", body)
			}
			return nil
		})
	}
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, s.Logs())
		s.Stop()
		return nil, err
	}
	return s, nil
}

// run starts a process whose output goes to a log file in dir.
func (s *Server) run(name, path string, args ...string) error {
	p := &proc{name: name, log: filepath.Join(s.dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); _ = logf.Close(); close(p.exited) }()
	s.procs = append(s.procs, p)
	return nil
}

// Stop stops the API server, then etcd (SIGTERM, SIGKILL after 20 s).
func (s *Server) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	s.procs = nil
}

// Logs returns the last 4 KiB of each process's log, for a failure.
func (s *Server) Logs() string {
	var b strings.Builder
	for _, p := range s.procs {
		if l, err := os.ReadFile(p.log); err == nil {
			fmt.Fprintf(&b, "---- %s log (last 4 KiB):\n%s\n", p.name, tail(l, 4096))
		}
	}
	return b.String()
}

// waitFor polls cond until it returns nil, following its progress rather
// than guessing a time: the limit only bounds a server that never comes.
func (s *Server) waitFor(what string, limit time.Duration, cond func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range s.procs {
			select {
			case <-p.exited:
				return fmt.Errorf("waiting for %s: %s exited", what, p.name)
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last = cond(ctx)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s waiting for %s: %v", limit, what, last)
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the CustomResourceDefinition in file and waits until
// its resource is served.
func (s *Server) InstallCRD(file string, served schema.GroupVersionResource) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(crdGVR).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the CRD of %s: %w", file, err)
	}
	return s.waitFor(served.Resource+" to be served", time.Minute, func(ctx context.Context) error {
		_, err := dyn.Resource(served).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

// freePorts returns n loopback ports free now, picked below the kernel's
// ephemeral range (32768 and up): a port from ":0" can be handed to any
// outgoing connection before etcd or the server binds it, which a busy
// machine does. Another process could still bind one meanwhile; the
// server then fails to start and says so in its log.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports below the ephemeral range", n)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+mrand.IntN(12000)))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// WriteKubeconfig writes a kubeconfig file that reaches the server as
// Config does, for the processes a test or benchmark starts.
func (s *Server) WriteKubeconfig(path string) error {
	c := s.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, InsecureSkipTLSVerify: c.Insecure, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// Pids are the processes of etcd and the API server.
func (s *Server) Pids() []int {
	var out []int
	for _, p := range s.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// NewWithReplicatedVolumes starts a server under dir/api for a program
// (a benchmark) that runs Ferry's processes against it: the
// ReplicatedVolume CRD installed (crd, the file's path) and a kubeconfig
// written to dir/kubeconfig, whose path it returns.
func NewWithReplicatedVolumes(dir, crd string, gvr schema.GroupVersionResource) (*Server, string, error) {
	if err := os.Mkdir(filepath.Join(dir, "api"), 0o700); err != nil {
		return nil, "", err
	}
	s, err := New(filepath.Join(dir, "api"))
	if err != nil {
		return nil, "", err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := s.InstallCRD(crd, gvr); err != nil {
		s.Stop()
		return nil, "", err
	}
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		s.Stop()
		return nil, "", err
	}
	return s, kubeconfig, nil
}
