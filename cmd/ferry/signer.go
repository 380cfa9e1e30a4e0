package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/certsigner"
	"github.com/ferry-csi/ferry/adapters/peerca"
	peeridentity "github.com/ferry-csi/ferry/app/identity"
)

// SignerOptions: the peer signer (signer mode).
type SignerOptions struct {
	CACert, CAKey string
	MaxLifetime   time.Duration
}

func signerFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	fs.StringVar(&o.CACert, "ca-cert", "/etc/ferry/ca/tls.crt", "the peer CA's certificate (the Secret ferry-peer-ca; read again at each signature, so a rotated Secret needs no restart)")
	fs.StringVar(&o.CAKey, "ca-key", "/etc/ferry/ca/tls.key", "the peer CA's private key")
	fs.DurationVar(&o.MaxLifetime, "max-lifetime", peeridentity.DefaultSignerMaxLifetime, "the longest a node's peer certificate is issued for (as the node asks, within 1h and this, never past the CA's expiry); nodes renew at two thirds of it")
	kubeFlags(fs, o)
	return o
}

func (o *Options) validateSigner() error {
	var errs []error
	if o.CACert == "" || o.CAKey == "" {
		errs = append(errs, errors.New("--ca-cert and --ca-key are required"))
	}
	if o.MaxLifetime < peeridentity.SignerMinLifetime {
		errs = append(errs, fmt.Errorf("--max-lifetime must be at least %s", peeridentity.SignerMinLifetime))
	}
	return errors.Join(errs...)
}

// signerApp issues every node its own peer certificate (app/identity's
// Signer): certificate signing requests to ferry.zfs.csi.io/peer, granted
// only to the node daemon asking for the node its token names.
func signerApp(o *Options) fx.Option {
	return fx.Options(
		fx.Supply(o),
		fx.Provide(func() (*zap.Logger, error) { return newLogger(o.LogOptions, "", "signer") }),
		fx.WithLogger(func(log *zap.Logger) fxevent.Logger {
			l := &fxevent.ZapLogger{Logger: log.Named("fx")}
			l.UseLogLevel(zapcore.DebugLevel)
			return l
		}),
		fx.Invoke(runSigner),
	)
}

func runSigner(lc fx.Lifecycle, o *Options, log *zap.Logger) error {
	cfg, err := kubeConfig(o.Kubeconfig, "signer")
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ca := peerca.New(o.CACert, o.CAKey)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	close(done) // until started
	lc.Append(fx.Hook{
		OnStart: func(start context.Context) error {
			if _, err := ca.NotAfter(start); err != nil {
				cancel()
				return fmt.Errorf("peer CA (--ca-cert, --ca-key): %w", err)
			}
			reqs, err := certsigner.Start(ctx, kube)
			if err != nil {
				cancel()
				return fmt.Errorf("watch the certificate signing requests: %w", err)
			}
			s := peeridentity.NewSigner(peeridentity.SignerConfig{Namespace: o.Namespace, MaxLifetime: o.MaxLifetime}, reqs, ca, log.Named("signer"))
			done = make(chan struct{})
			go func() { defer close(done); s.Run(ctx) }()
			log.Info("signing peer certificates", zap.String("namespace", o.Namespace), zap.Duration("maxLifetime", o.MaxLifetime))
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			<-done
			return nil
		},
	})
	return nil
}
