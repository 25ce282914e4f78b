"""v8-build's model builder: a circuit hydrated with a model manifest into GraphIR."""
