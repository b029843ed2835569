"""`cdctl collect`: every component's event log, gathered through the Kubernetes API into one collected file.

- cdctl.collect.pods: which pods to read (the controller replicas and the kubelet plugins of the driver
  namespace, narrowed by node) and their HTTP ports;
- cdctl.collect.fetch: one pod: its token, its published head, its logs, each streamed into the file;
- cdctl.collect.run: a whole collection: sources in parallel, progress, the read models, the summary.
The file's schema is cdctl.store.collected's; docs/collect.md is the operator's guide.
"""
