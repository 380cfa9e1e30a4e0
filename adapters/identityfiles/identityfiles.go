// Package identityfiles keeps a node's peer certificate and its key
// (ports.PeerIdentityFiles) as tls.crt and tls.key in a directory on the
// host, where the node's other Ferry processes read them.
//
// Each file is replaced by rename: written beside under a temporary name,
// synced, renamed over the old one, the directory synced, so that a reader
// (or a node that crashed) finds a file whole, the old one or the new
// one. The key goes first, then the certificate: for a moment the
// directory may hold the new key with the old certificate, never a
// certificate whose key was never written. A crash between the two
// leaves them so, and Load returns them as they are (it judges no
// certificate): app/identity's Enroller, which checks that the
// certificate is the key's, finds them no pair at start and asks for a
// new one; a reader keeps the pair it had until the two match. The key
// is readable by its owner only (0600), the certificate by all (0644).
//
// The directory is named by an absolute path and must not be a symbolic
// link (nor be swapped for one while in use): the files are written
// through a handle on the directory itself, which no link inside it can
// lead out of.
//
// RootsFile reads the CA certificates peers verify with
// (ports.PeerRoots), from a file such as a mounted Secret's ca.crt.
package identityfiles

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferry-csi/ferry/ports"
)

// The files in the directory.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

const (
	certMode = 0o644
	keyMode  = 0o600
	dirMode  = 0o755
	// maxSize bounds what Load reads of a file: a certificate chain and a
	// key are a few kilobytes.
	maxSize = 1 << 20
	// tmpInfix marks the temporary files (hidden, named after the file
	// they replace).
	tmpInfix = ".tmp-"
)

// Dir is a node's peer certificate and key in one directory.
type Dir struct {
	dir string
}

var _ ports.PeerIdentityFiles = (*Dir)(nil)

// New returns the pair kept in dir, an absolute path (cleaned). The
// directory need not exist yet: Save creates it (0755).
func New(dir string) (*Dir, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("peer identity directory %q is not an absolute path", dir)
	}
	return &Dir{dir: filepath.Clean(dir)}, nil
}

// Path is the directory.
func (d *Dir) Path() string { return d.dir }

// Load implements ports.PeerIdentityFiles.
func (d *Dir) Load() (certPEM, keyPEM []byte, err error) {
	root, err := d.open(false)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	if certPEM, err = d.read(root, CertFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = d.read(root, KeyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// Save implements ports.PeerIdentityFiles.
func (d *Dir) Save(certPEM, keyPEM []byte) error {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return fmt.Errorf("save the peer identity in %s: an empty certificate or key: %w", d.dir, ports.ErrInvalid)
	}
	root, err := d.open(true)
	if err != nil {
		return err
	}
	defer root.Close()
	d.removeTemporaries(root)
	if err := d.replace(root, KeyFile, keyPEM, keyMode); err != nil {
		return err
	}
	if err := d.replace(root, CertFile, certPEM, certMode); err != nil {
		return err
	}
	return nil
}

// open returns a handle on the directory, creating it first when create
// is set; ErrNotFound when it is missing and create is not.
func (d *Dir) open(create bool) (*os.Root, error) {
	fi, err := os.Lstat(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, fmt.Errorf("peer identity directory %s does not exist: %w", d.dir, ports.ErrNotFound)
		}
		if err := os.MkdirAll(d.dir, dirMode); err != nil {
			return nil, fmt.Errorf("create the peer identity directory: %w", err)
		}
		fi, err = os.Lstat(d.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("peer identity directory: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("peer identity directory %s is a symbolic link: refused, the key would be written wherever it points", d.dir)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("peer identity directory %s is not a directory (%s)", d.dir, fi.Mode().Type())
	}
	root, err := os.OpenRoot(d.dir)
	if err != nil {
		return nil, fmt.Errorf("peer identity directory: %w", err)
	}
	// The directory opened is the one checked, not a link put in its
	// place between the two.
	st, err := root.Stat(".")
	if err != nil || !os.SameFile(fi, st) {
		root.Close()
		return nil, fmt.Errorf("peer identity directory %s was replaced while being opened: refused", d.dir)
	}
	return root, nil
}

func (d *Dir) read(root *os.Root, name string) ([]byte, error) {
	path := filepath.Join(d.dir, name)
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s: %w", path, ports.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes, no certificate or key", path, maxSize)
	}
	return b, nil
}

// replace writes b to name by rename, with mode (whatever the umask), and
// syncs the file before and the directory after the rename, so that the
// new content is on disk before it is in place, and in place for good.
func (d *Dir) replace(root *os.Root, name string, b []byte, mode fs.FileMode) error {
	path := filepath.Join(d.dir, name)
	tmp := "." + name + tmpInfix + rand.Text()[:12]
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(b)
	merr := f.Chmod(mode)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, merr, serr, cerr); err != nil {
		root.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		root.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncDir(root); err != nil {
		return fmt.Errorf("write %s: sync the directory: %w", path, err)
	}
	return nil
}

func syncDir(root *os.Root) error {
	dir, err := root.Open(".")
	if err != nil {
		return err
	}
	return errors.Join(dir.Sync(), dir.Close())
}

// removeTemporaries removes the temporary files a writer that stopped
// half way left (one writer per directory: the node's daemon).
func (d *Dir) removeTemporaries(root *os.Root) {
	dir, err := root.Open(".")
	if err != nil {
		return
	}
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	for _, n := range names {
		if strings.HasPrefix(n, "."+CertFile+tmpInfix) || strings.HasPrefix(n, "."+KeyFile+tmpInfix) {
			root.Remove(n)
		}
	}
}

// RootsFile is a file of CA certificates (PEM), read at every call
// (ports.PeerRoots): a mounted Secret's file is replaced when it changes.
type RootsFile string

var _ ports.PeerRoots = RootsFile("")

// Roots implements ports.PeerRoots.
func (f RootsFile) Roots() ([]byte, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("peer CA file %s: %w", string(f), ports.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("peer CA file: %w", err)
	}
	return b, nil
}
