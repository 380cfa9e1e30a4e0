// Package nodefence fences a lost node from outside by a command an
// administrator configures (ports.NodeFencer): a power switch's CLI, a
// fence agent, a script that asks a remediation operator and waits.
package nodefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// Command runs Path with the lost node's name as its only argument; exit
// status 0 means the node is fenced (it can no longer write).
type Command struct {
	Path string
}

var _ ports.NodeFencer = Command{}

// FenceNode runs the command for node, until ctx ends.
func (c Command) FenceNode(ctx context.Context, node replica.Node) error {
	if node == "" || strings.HasPrefix(string(node), "-") {
		return fmt.Errorf("fence node %q: not a node name", node)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Path, string(node))
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(stderr.String())
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("%s %s exited %d: %s", c.Path, node, exit.ExitCode(), msg)
	}
	return fmt.Errorf("%s %s: %w", c.Path, node, err)
}
