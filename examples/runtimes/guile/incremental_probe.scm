;;; incremental_probe.scm — does Guile keep working with bdwgc switched to
;;; incremental mode after Guile initialised it, and what does it cost?
;;;
;;;   guile-gcpressure incremental_probe.scm inc|noinc [ROUNDS [nocompile]]
;;;
;;; Makes a Boehm-collector heap (gcpressure_boehm_init(inc?, 0)), then runs
;;; port I/O into GC-allocated buffers (files to strings and bytevectors, a
;;; pipe read line by line, `read` of Scheme source) while allocating and
;;; dropping device arrays, and compiles a file. Under mprotect-based dirty
;;; bits a read(2) into a protected page would fail with EFAULT. Prints the
;;; time taken; exits nonzero if any result differs between rounds.

(use-modules (gcpressure) (ice-9 rdelim) (ice-9 textual-ports) (ice-9 binary-ports)
             (ice-9 popen) (rnrs bytevectors) (system base compile) (ice-9 format))

(define args (command-line))
(define inc? (and (> (length args) 1) (equal? (cadr args) "inc")))
(define rounds (if (> (length args) 2) (string->number (caddr args)) 60))
(define compile? (not (member "nocompile" args)))
(define heap (make-device-heap #:hard-limit "16MiB" #:collector 'boehm #:incremental? inc?))
(format #t "bdwgc incremental: ~a~%" (assq-ref (bdwgc-setup) 'incremental))

(define data-dir (string-append (assq-ref %guile-build-info 'pkgdatadir) "/" (effective-version)))
(define files (list (string-append data-dir "/ice-9/boot-9.scm")
                    (string-append data-dir "/ice-9/match.scm")
                    (string-append data-dir "/ice-9/format.scm")))
(define (read-all-forms port)
  (let loop ((acc '())) (let ((f (read port))) (if (eof-object? f) (reverse acc) (loop (cons f acc))))))

(define (round-result i)
  (let* ((f (list-ref files (modulo i 3)))
         (s (call-with-input-file f get-string-all))
         (bv (call-with-input-file f get-bytevector-all #:binary #t))
         (p (open-input-pipe (string-append "cat " f)))
         (lines (let rd ((n 0)) (if (eof-object? (read-line p)) n (rd (+ n 1)))))
         (forms (call-with-input-file f read-all-forms)))
    (close-pipe p)
    (device-array heap 65536)
    (device-array heap 65536)
    (heap-iteration! heap)
    (list (string-length s) (bytevector-length bv) lines (length forms))))

(define t0 (get-internal-real-time))
(define first-results (map round-result (iota 3)))
(define ok
  (let loop ((i 3) (ok #t))
    (if (>= i rounds)
        ok
        (loop (+ i 1) (and (equal? (round-result i) (list-ref first-results (modulo i 3))) ok)))))
(when compile?
  (let ((out (string-append (or (getenv "TMPDIR") "/tmp") "/gcpressure-probe-" (number->string (getpid)) ".go")))
    (compile-file (cadr files) #:output-file out)
    (delete-file out)))
(format #t "~a rounds~a: ~,2f s, results ~a, device collections ~a~%" rounds
        (if compile? " + compile-file" "")
        (exact->inexact (/ (- (get-internal-real-time) t0) internal-time-units-per-second))
        (if ok "identical" "DIFFERENT")
        (json-ref (heap-stats-alist heap) "gc" "by_kind"))
(exit (if ok 0 1))
