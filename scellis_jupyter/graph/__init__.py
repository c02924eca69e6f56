"""Graph: the typed IR (nodes, primitive op set, shape inference), autodiff and the eager façade."""
