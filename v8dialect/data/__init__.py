"""The data v8 reads: contract registries, kernel maps, circuits, model manifests, the C ABI the
runtime headers declare, and where the packaged data lives.
"""
