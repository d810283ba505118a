// An example worker, not published: see README.md.
module github.com/tikk-scheduler/tikk/clients/go-worker

go 1.26.0

// The Go stubs of proto/tikk/v1 live in the checkout's own module, clients/go.
replace github.com/tikk-scheduler/tikk/clients/go => ../go

require (
	github.com/tikk-scheduler/tikk/clients/go v0.0.0-00010101000000-000000000000
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)
