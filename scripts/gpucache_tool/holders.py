"""Who holds the memory, by library, and what an allocator inside the program means
(report/holders.c, character for character: change both together)."""

from .units import format_bytes, format_count

_CANNOT_SEE = "how much of it %s, gpucache cannot see."
_SERVE_TORCH = (" Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or `gpucache run --serve-torch`) so "
                "gpucache serves each tensor.")

# The JSON's inner_allocator names, each with what a user can do about it.
INNER_ALLOCATORS = ("pytorch", "pytorch-expandable", "cupy", "rmm", "xla", "tensorflow", "arena")


def held_bytes(h):
    return h["pool_bytes"] + h["vmm_bytes"]


def explain(h):
    """The "Inner pool:" paragraph for a by_library entry, "" when none was recognised."""
    inner = h.get("inner_allocator")
    b = format_bytes(held_bytes(h))
    pieces = h["pool_blocks"] + h["vmm_handles"]
    c, s = format_count(pieces), "" if pieces == 1 else "s"
    if inner == "pytorch":
        return ("PyTorch's caching allocator is on: the %s it holds are its reserved memory; "
                % b + _CANNOT_SEE % "its tensors use" + _SERVE_TORCH)
    if inner == "pytorch-expandable":
        return ("PyTorch's caching allocator is on, with expandable segments: the %s it maps "
                "itself (cuMemCreate, outside gpucache's pool) are its reserved memory; " % b
                + _CANNOT_SEE % "its tensors use" + _SERVE_TORCH)
    if inner == "cupy":
        return ("CuPy's memory pool is on: the %s it holds are its pool; " % b
                + _CANNOT_SEE % "its arrays use"
                + " Call cupy.cuda.set_allocator(None) at start so gpucache serves each array.")
    if inner == "rmm":
        return ("RMM's pool resource is on: the %s it holds in %s allocation%s are its pool; "
                % (b, c, s) + _CANNOT_SEE % "is in use"
                + " A plain rmm.mr.CudaMemoryResource (rmm.reinitialize(pool_allocator=False)) "
                "lets gpucache serve each allocation.")
    if inner == "xla":
        return ("XLA's BFC allocator (JAX's default) holds %s in %s region%s, its reserved "
                "memory; " % (b, c, s) + _CANNOT_SEE % "its buffers use"
                + " Run with XLA_PYTHON_CLIENT_ALLOCATOR=platform (or `gpucache run "
                "--serve-jax`) so gpucache serves each buffer.")
    if inner == "tensorflow":
        return ("TensorFlow's BFC allocator holds %s, its reserved memory; " % b
                + _CANNOT_SEE % "its tensors use"
                + " TensorFlow has no switch that hands each tensor to CUDA; "
                "TF_FORCE_GPU_ALLOW_GROWTH=true at least makes it grow only as needed.")
    if inner == "arena":
        return ("%s holds %s in %s large allocation%s, an arena of its own; "
                % (h["library"], b, c, s) + _CANNOT_SEE % "is in use")
    return ""


def wrap(text, width):
    """Greedy word wrap on spaces, as put_wrapped in report/render/text.c."""
    lines, line = [], ""
    for word in text.split(" "):
        if not word:
            continue
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = line + " " + word if line else word
    lines.append(line)
    return lines
