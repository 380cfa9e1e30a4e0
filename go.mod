module github.com/ferry-csi/ferry

go 1.26.0

require github.com/mistifyio/go-zfs/v3 v3.0.1

require github.com/google/uuid v1.2.0 // indirect
