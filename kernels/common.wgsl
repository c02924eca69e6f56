// Pieces every kernel family shares, picked by name from Python (templates.snippet) to fill a kernel's
// placeholders: the f16 directive for ENABLE, one storage binding per operand for BINDINGS.
// Not a kernel by itself.

//=== enable_f16
enable f16;

//=== binding
@group(0) @binding({{I}}) var<storage, read_write> {{NAME}}: array<{{T}}>;
