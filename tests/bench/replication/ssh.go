package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-csi/ferry/ports"
)

// The ssh way: sshd runs in namespace a with a throw-away host key and one
// authorized key, both generated into the run's temporary directory; the
// receiver node (namespace b) pulls `zfs send | mbuffer` over ssh with
// AES-128-GCM into `mbuffer | zfs recv`. One master connection is opened
// before the rounds and every transfer is a session on it, as Ferry keeps
// its gRPC connection: no transfer pays for a handshake.
const mbufferArgs = "-q -s 1M -m 128M"

// sshTools finds the tools the ssh way needs, or says which are missing.
func sshTools() (sshd string, err error) {
	var missing []string
	for _, t := range []string{"ssh", "ssh-keygen", "mbuffer"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	sshd, lerr := exec.LookPath("sshd")
	if lerr != nil {
		if _, serr := os.Stat("/usr/sbin/sshd"); serr == nil {
			sshd = "/usr/sbin/sshd"
		} else {
			missing = append(missing, "sshd")
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("the ssh comparison needs %s (Debian: apt-get install -y mbuffer openssh-server openssh-client)", strings.Join(missing, ", "))
	}
	return sshd, nil
}

func (b *bench) startSSH() error {
	sshd, err := sshTools()
	if err != nil {
		return err
	}
	dir := filepath.Join(b.tmp, "ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	hostKey, userKey := filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "user_ed25519")
	for _, k := range []string{hostKey, userKey} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-bench", "-f", k).CombinedOutput(); err != nil {
			return fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(userKey + ".pub")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		return err
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		return err
	}
	knownHosts := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(knownHosts, []byte(addrA+" "+string(hostPub)), 0o600); err != nil {
		return err
	}
	config := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(config, []byte(strings.Join([]string{
		"ListenAddress " + addrA + ":22",
		"HostKey " + hostKey,
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"PidFile none",
		"Ciphers aes128-gcm@openssh.com",
		"Compression no",
		"LogLevel ERROR",
		"",
	}, "\n")), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		return err
	}
	server := inNetns(nsA, sshd, "-D", "-e", "-f", config)
	server.Stderr = os.Stderr
	if err := b.startProc(server, nil); err != nil {
		return err
	}
	control := filepath.Join(dir, "control")
	opts := []string{"-F", "/dev/null", "-i", userKey, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + knownHosts, "-o", "StrictHostKeyChecking=yes",
		"-c", "aes128-gcm@openssh.com", "-o", "Compression=no", "-o", "ControlPath=" + control}
	b.sshCmd = "ssh " + strings.Join(opts, " ") + " -o ControlMaster=no root@" + addrA
	// The master connection, in the receiver's namespace. sshd needs a
	// moment to listen: retry the master until its socket appears.
	deadline := time.Now().Add(10 * time.Second)
	for {
		master := inNetns(nsB, "ssh", append(opts, "-M", "-N", "root@"+addrA)...)
		var stderr strings.Builder
		master.Stderr = &stderr
		if err := b.startProc(master, nil); err != nil {
			return err
		}
		for i := 0; i < 20; i++ {
			if _, err := os.Stat(control); err == nil {
				return nil
			}
			if master.ProcessState != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			return errors.New("ssh master connection: " + strings.TrimSpace(stderr.String()))
		}
	}
}

// sshPipeline is the shell pipeline the receiver node runs for req.
func (b *bench) sshPipeline(req ports.SendRequest, target string) string {
	remote := "zfs " + strings.Join(snapArgs(req), " ") + " | mbuffer " + mbufferArgs
	return fmt.Sprintf("%s '%s' | mbuffer %s | zfs recv %s", b.sshCmd, remote, mbufferArgs, dstPool+"/ferry/"+target)
}
