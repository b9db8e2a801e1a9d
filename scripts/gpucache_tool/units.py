"""Numbers for people, as report/render/format.c writes them."""

def _scaled(sign, v, unit):
    if v < 9.995:
        return "%s%.2f %s" % (sign, v, unit)
    if v < 99.95:
        return "%s%.1f %s" % (sign, v, unit)
    return "%s%.0f %s" % (sign, v, unit)


def format_bytes(n):
    """'512 B', '3.68 GiB': three significant digits, the unit keeps the number below 1024."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    mag, sign = abs(n), "-" if n < 0 else ""
    if mag < 1024:
        return "%s%d B" % (sign, mag)
    u, scale = 1, 1024.0
    while u + 1 < len(units) and mag / scale >= 1023.5:
        u, scale = u + 1, scale * 1024.0
    return _scaled(sign, mag / scale, units[u])


def format_duration(ns):
    units = ["ns", "us", "ms", "s"]
    mag, sign = abs(ns), "-" if ns < 0 else ""
    if mag < 1000:
        return "%s%d ns" % (sign, mag)
    u, scale = 1, 1000.0
    while u + 1 < len(units) and mag / scale >= 999.5:
        u, scale = u + 1, scale * 1000.0
    return _scaled(sign, mag / scale, units[u])


def format_count(n):
    return "{:,}".format(n)


def percent_floor(part, whole):
    if part < 0 or whole <= 0:
        return -1
    return part * 100 // whole
