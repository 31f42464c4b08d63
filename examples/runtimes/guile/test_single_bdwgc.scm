;;; test_single_bdwgc.scm — one bdwgc in the process (ctest guile_single_bdwgc).
;;;
;;; With (gcpressure) loaded and a heap of each collector kind made:
;;; 1. exactly one libgc shared object is mapped into the process, and it is
;;;    the one libguile itself uses;
;;; 2. neither libgcpressure.so nor libguile-gcpressure.so defines a GC_ symbol
;;;    of its own (no static copy of bdwgc inside them): their GC_ references
;;;    all bind to that one libgc;
;;; 3. the collector the heap drives is Guile's: a collection the policy asks
;;;    for advances Guile's own (gc-stats) collection count.

(use-modules (gcpressure) (ice-9 rdelim) (ice-9 popen) (ice-9 regex) (ice-9 ftw) (srfi srfi-1) (ice-9 format))

(define failures 0)
(define (check name ok)
  (format #t "~a ~a~%" (if ok "ok  " "FAIL") name)
  (unless ok (set! failures (+ failures 1))))

(define heap (make-device-heap #:hard-limit "8MiB"))
(define heap-b (make-device-heap #:hard-limit "8MiB" #:collector 'boehm))
(device-array heap 1024)
(device-array heap-b 1024)

(define (mapped-objects)
  (call-with-input-file "/proc/self/maps"
    (lambda (p)
      (let loop ((acc '()))
        (let ((l (read-line p)))
          (if (eof-object? l)
              (delete-duplicates acc)
              (let ((m (string-match "[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +(/.*)$" l)))
                (loop (if m (cons (match:substring m 1) acc) acc)))))))))

(define objects (mapped-objects))
(define (basename f) (let ((i (string-rindex f #\/))) (if i (substring f (+ i 1)) f)))
(define libgcs (filter (lambda (f) (string-match "^libgc\\.so" (basename f))) objects))
(define ours (filter (lambda (f) (string-match "^lib(guile-)?gcpressure\\.so" (basename f))) objects))
(format #t "libgc mapped: ~a~%our libraries: ~a~%" libgcs ours)
(check "exactly one libgc.so is mapped" (= (length libgcs) 1))
(check "libgcpressure.so and libguile-gcpressure.so are mapped" (= (length ours) 2))
(check "no second collector library (libgccpp, libgc-*, libatomic_ops-gc) is mapped"
       (not (any (lambda (f) (string-match "^libgc(cpp|-)" (basename f))) objects)))

;; A GC_ symbol defined in one of our libraries would be a private bdwgc.
(define (defined-gc-symbols lib)
  (let* ((p (open-input-pipe (string-append "nm -D --defined-only " lib " 2>/dev/null")))
         (syms (let loop ((acc '()))
                 (let ((l (read-line p)))
                   (if (eof-object? l) acc
                       (loop (if (string-match " (GC_|GC_malloc|GC_gcollect)[A-Za-z_]*$" l) (cons l acc) acc)))))))
    (close-pipe p)
    syms))
(if (zero? (system "nm --version >/dev/null 2>&1"))
    (for-each (lambda (lib)
                (let ((syms (defined-gc-symbols lib)))
                  (check (format #f "~a defines no GC_ symbol (found ~a)" (basename lib) (length syms))
                         (null? syms))))
              ours)
    (format #t "skip nm checks: nm (binutils) not installed~%"))

;; Guile's finalization set-up survives both heaps: finalize-on-demand with
;; Guile's own notifier (which wakes Guile's finalizer thread) — gcpressure
;; neither replaced it nor started a finalizer thread of its own. And the
;; GC_gcollect our module calls is the one in the single libgc.
(let ((setup (bdwgc-setup)))
  (format #t "bdwgc set-up: ~a~%" setup)
  (check "finalize-on-demand, as Guile set it" (assq-ref setup 'finalize-on-demand))
  (check "the finalizer notifier is Guile's"
         (string-match "libguile-3\\.0\\.so" (assq-ref setup 'notifier-library)))
  (check "the GC start callback is Guile's, or gcpressure's chaining to Guile's"
         (string-match "lib(guile-3\\.0|gcpressure)\\.so" (assq-ref setup 'start-callback-library)))
  (check "non-incremental, as Guile runs bdwgc" (not (assq-ref setup 'incremental)))
  (check "GC_gcollect resolves to the mapped libgc"
         (and (= (length libgcs) 1)
              (not (string-null? (assq-ref setup 'gc-library)))
              (equal? (canonicalize-path (assq-ref setup 'gc-library)) (canonicalize-path (car libgcs))))))
(define (thread-count)
  (length (scandir "/proc/self/task" (lambda (f) (not (member f '("." "..")))))))
(format #t "threads in the process: ~a~%" (thread-count))

(define (guile-gc-count) (assq-ref (gc-stats) 'gc-times))
(let ((before (guile-gc-count)))
  (heap-collect! heap #t)
  (check "a collection the callbacks heap asks for is one of Guile's collections"
         (> (guile-gc-count) before)))
(let ((before (guile-gc-count)))
  (heap-collect! heap-b #t)
  (check "... and one the Boehm heap asks for, too" (> (guile-gc-count) before)))

(format #t "~a failure(s)~%" failures)
(exit (if (zero? failures) 0 1))
