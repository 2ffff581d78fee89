"""One resource, for the real-engine benchmark's baseline."""

import pulumi
import pulumi_gcp as gcp

bucket = gcp.storage.Bucket("one", name="one-resource-bucket", location="US")
pulumi.export("name", bucket.name)
