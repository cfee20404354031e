# libworker/: librdzvworker, linked into training programs (issue 4).
