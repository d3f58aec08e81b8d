module github.com/gracepoll/gracepoll

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
)
