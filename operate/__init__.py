"""Commands that act on real stacks through the Pulumi engine (the Automation API)."""
