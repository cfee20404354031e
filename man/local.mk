# man/: manual pages (issue 5).
