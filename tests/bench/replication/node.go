package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// The two "nodes" are this program run again inside a namespace each
// (`replication node -role sender|receiver ...`), so that each side has its
// own process, as two nodes would:
//
//   - the sender (namespace a) serves its pool through Ferry's peer server
//     (mutual TLS) and, for the reference, a plain TCP relay: a connection
//     names a snapshot, the relay runs `zfs send` and copies its output to
//     the socket in 1 MiB writes (what `zfs send | nc` does, with large
//     pieces);
//   - the receiver (namespace b) takes one job per line on stdin, runs it
//     and answers how long it took on stdout. It times every way the same
//     way: from the request to the end of `zfs recv`.
const (
	peerPort  = "7443"
	relayPort = "7000"
	relayBuf  = 1 << 20 // the relay's reads and writes
	pipeSize  = 1 << 20 // the relay's pipes to and from zfs, as Ferry's
)

// job is one timed transfer, run by the receiver.
type job struct {
	Way    string // "reference", "ferry" or "ssh"
	Volume string
	From   string `json:",omitempty"`
	To     string
	Target string
	Shell  string `json:",omitempty"` // ssh: the pipeline to run
}

type answer struct {
	Seconds float64
	Err     string `json:",omitempty"`
}

type nodeFlags struct {
	role, pool, cert, key, ca, cpuprofile string
	peerPort                              string
	relay, plaintext                      bool
}

func nodeMain(args []string) error {
	var f nodeFlags
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	fs.StringVar(&f.role, "role", "", "sender or receiver")
	fs.StringVar(&f.pool, "pool", "", "the node's pool")
	fs.StringVar(&f.cert, "cert", "", "peer certificate")
	fs.StringVar(&f.key, "key", "", "peer key")
	fs.StringVar(&f.ca, "ca", "", "peer CA")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write this process's CPU profile here")
	fs.BoolVar(&f.plaintext, "plaintext", false, "Ferry's transport without TLS")
	fs.StringVar(&f.peerPort, "peer-port", peerPort, "the sender's peer service port")
	fs.BoolVar(&f.relay, "relay", true, "sender: serve the reference's plain TCP relay")
	_ = fs.Parse(args)
	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	store, err := zfs.New(zfs.Config{Pool: f.pool, Parent: "ferry", Driver: driver})
	if err != nil {
		return err
	}
	if err := store.Open(ctx); err != nil {
		return err
	}
	tlsFiles := peer.TLSFiles{Cert: f.cert, Key: f.key, CA: f.ca}
	switch f.role {
	case "sender":
		return sender(store, tlsFiles, f)
	case "receiver":
		return receiver(store, tlsFiles, f)
	}
	return fmt.Errorf("unknown role %q", f.role)
}

// sender serves until its stdin closes (the benchmark ended or died).
func sender(store *zfs.Store, tlsFiles peer.TLSFiles, f nodeFlags) error {
	var creds credentials.TransportCredentials
	if !f.plaintext {
		var err error
		if creds, err = peer.ServerTLS(tlsFiles); err != nil {
			return err
		}
	}
	pl, err := net.Listen("tcp", net.JoinHostPort(addrA, f.peerPort))
	if err != nil {
		return err
	}
	server := peer.NewServer(store, creds, zap.NewNop())
	go func() { _ = server.Serve(pl) }()
	defer server.Stop()
	if f.relay {
		if err := serveRelay(); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// serveRelay serves the reference's plain TCP relay.
func serveRelay() error {
	rl, err := net.Listen("tcp", net.JoinHostPort(addrA, relayPort))
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := rl.Accept()
			if err != nil {
				return
			}
			go relaySend(c.(*net.TCPConn))
		}
	}()
	return nil
}

// relaySend reads "<snapshot> [<base snapshot>]\n" and streams zfs send's
// output to the connection. A failure closes the connection early: zfs recv
// on the other side then sees a truncated stream and fails.
func relaySend(c *net.TCPConn) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	args := []string{"send"}
	if len(f) == 2 {
		args = append(args, "-i", f[1])
	}
	args = append(args, f[0])
	cmd := exec.Command("zfs", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return
	}
	growPipe(out.(*os.File))
	if err := cmd.Start(); err != nil {
		return
	}
	_, cerr := copyLarge(c, out)
	if werr := cmd.Wait(); werr != nil || cerr != nil {
		c.SetLinger(0) // a reset, not a clean end
		return
	}
	_ = c.CloseWrite()
}

// copyLarge copies in relayBuf pieces (io.Copy would use splice or 32 KiB
// pieces).
func copyLarge(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, relayBuf)
	var n int64
	for {
		k, err := io.ReadFull(r, buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func growPipe(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, pipeSize)
}

// receiver runs the jobs read from stdin, one at a time.
func receiver(store *zfs.Store, tlsFiles peer.TLSFiles, f nodeFlags) error {
	var creds credentials.TransportCredentials
	if !f.plaintext {
		var err error
		if creds, err = peer.ClientTLS(tlsFiles); err != nil {
			return err
		}
	}
	addr := net.JoinHostPort(addrA, f.peerPort)
	client := peer.NewClient(func(replica.Node) (string, error) { return addr, nil }, creds)
	defer client.Close()
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	fmt.Println("ready")
	for in.Scan() {
		var j job
		if err := json.Unmarshal(in.Bytes(), &j); err != nil {
			return err
		}
		var run func() error
		switch j.Way {
		case "ferry":
			run = func() error { return ferryFetch(client, store, j) }
		case "reference":
			run = func() error { return relayRecv(store, j) }
		case "ssh":
			run = func() error { return shell(j.Shell) }
		default:
			return fmt.Errorf("unknown way %q", j.Way)
		}
		start := time.Now()
		err := run()
		a := answer{Seconds: time.Since(start).Seconds()}
		if err != nil {
			a.Err = err.Error()
		}
		if err := out.Encode(a); err != nil {
			return err
		}
	}
	return in.Err()
}

// ferryFetch is what a volume manager does to fetch a snapshot: open the
// peer's stream, receive it into the store.
func ferryFetch(client *peer.Client, store *zfs.Store, j job) error {
	stream, err := client.Fetch(ctx, "sender", ports.SendRequest{Volume: volume.ID(j.Volume), From: j.From, To: j.To})
	if err != nil {
		return err
	}
	defer stream.Close()
	return store.Receive(ctx, volume.ID(j.Target), stream)
}

// relayRecv is the reference: one plain TCP connection to the sender's
// relay, copied in 1 MiB pieces into zfs recv's stdin.
func relayRecv(store *zfs.Store, j job) error {
	c, err := net.Dial("tcp", net.JoinHostPort(addrA, relayPort))
	if err != nil {
		return err
	}
	defer c.Close()
	req := srcPool + "/ferry/" + j.Volume + "@" + j.To
	if j.From != "" {
		req += " " + srcPool + "/ferry/" + j.Volume + "@" + j.From
	}
	if _, err := io.WriteString(c, req+"\n"); err != nil {
		return err
	}
	cmd := exec.Command("zfs", "recv", dstPool+"/ferry/"+j.Target)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	growPipe(pw)
	cmd.Stdin = pr
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	pr.Close()
	_, cerr := copyLarge(pw, c)
	pw.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("zfs recv: %v: %s (stream: %v)", err, strings.TrimSpace(stderr.String()), cerr)
	}
	return nil
}

func shell(script string) error {
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
