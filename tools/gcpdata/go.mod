// Pin for tests/standins/gcp_schema.py: Google's API discovery documents, read from this module's
// download in the Go module cache at test time (never copied into the repository). The version is
// the one terraform-provider-google-beta requires at the commit gcp_schema.UPSTREAM names (its go.mod).
module tpu-slicing/tools/gcpdata

go 1.26

require google.golang.org/api v0.293.0
