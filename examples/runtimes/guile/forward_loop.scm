;;; forward_loop.scm — the Flux-style forward loop of examples/forward_loop,
;;; in Guile Scheme, on (gcpressure) device arrays.
;;;
;;; `layers` Dense layers y = relu.(W*x .+ b); each call allocates its product
;;; W*x and the broadcast result as device arrays and the loop just drops
;;; them, as Julia code does: no frees. Guile's collector, driven by device
;;; bytes through the pressure policy, is what gives the memory back.
;;;
;;;   guile forward_loop.scm [--backend host|cuda|cuda_async|auto]
;;;     [--policy NAME] (one of gcpressure_policy_names(), e.g. pressure)
;;;     [--workload steady|promote|burst|varied] [--iters N] [--layers N] [--d N]
;;;     [--batch N] [--host-heap-mib N] [--hard-limit SIZE] [--soft-limit SIZE]
;;;     [--collector callbacks|boehm] [--incremental] [--promote-share X]
;;;     [--burst-every N] [--burst-fraction X] [--seed N] [--no-sync]
;;;     [--trace FILE.csv] [--json] [--quiet]
;;;
;;; --policy explicit_free is the oracle: the loop frees each array with
;;; device-array-free! the moment it dies (no collection runs). The workloads
;;; are the C++ loop's (bench/forward/workload.cpp, Note [The workloads]):
;;;   steady   every iteration allocates the same arrays and drops them all;
;;;   promote  as steady, and each array is also kept alive, with probability
;;;            --promote-share (0.25), for 1..50 iterations (uniform, fixed
;;;            seed); it dies at the start of the iteration its life ends;
;;;   burst    as steady, and the last iteration of every --burst-every (50)
;;;            allocates --burst-fraction (0.5) of the hard limit in chunks of
;;;            min(256 MiB, hard limit / 16), writes them, holds them all at
;;;            once, then drops them;
;;;   varied   as steady, and each layer also allocates a side array of a
;;;            log-uniform size (fixed seed) from 4 KiB to min(256 MiB, hard
;;;            limit / 16), writes it and drops it at the end of the layer.
;;; (Guile's random, not the C++ loop's mt19937_64: same distributions, other
;;; draws.) Each iteration ends with the iteration hint, then
;;; heap-synchronize! (the sync point; --no-sync leaves it out).
;;;
;;; With --json the last line printed is one JSON object with the keys of
;;; examples/forward_loop (policy, backend, iterations, ooms, peak_live_bytes,
;;; peak_reserved_bytes, collections_minor, collections_full,
;;; collections_full_steady, max_pause_seconds, gc_seconds, wall_seconds,
;;; finalized) and a few of its own.

(use-modules (gcpressure)
             (ice-9 getopt-long)
             (ice-9 format))

(define option-spec
  '((backend (value #t)) (policy (value #t)) (iters (value #t)) (layers (value #t))
    (d (value #t)) (batch (value #t)) (host-heap-mib (value #t))
    (hard-limit (value #t)) (soft-limit (value #t)) (collector (value #t))
    (incremental (value #f)) (trace (value #t)) (json (value #f)) (quiet (value #f))
    (workload (value #t)) (promote-share (value #t)) (burst-every (value #t)) (burst-fraction (value #t))
    (seed (value #t)) (no-sync (value #f))
    (help (single-char #\h) (value #f))))

(define opts (getopt-long (command-line) option-spec))
(define (opt name default) (option-ref opts name default))
(define (opt-int name default)
  (let ((v (option-ref opts name #f)))
    (if v
        (or (string->number v) (begin (format (current-error-port) "--~a: not a number: ~a~%" name v) (exit 2)))
        default)))

(when (opt 'help #f)
  (display "usage: guile forward_loop.scm [--backend host|cuda|cuda_async|auto] [--policy NAME]
  [--iters N] [--layers N] [--d N] [--batch N] [--host-heap-mib N] [--hard-limit SIZE]
  [--soft-limit SIZE] [--collector callbacks|boehm] [--incremental] [--trace FILE.csv]
  [--workload steady|promote|burst|varied] [--promote-share X] [--burst-every N]
  [--burst-fraction X] [--seed N] [--no-sync] [--json] [--quiet]\n")
  (exit 0))

(define backend (string->symbol (opt 'backend "host")))
(define policy (opt 'policy "pressure"))
(define workload (opt 'workload "steady"))
(unless (member workload '("steady" "promote" "burst" "varied"))
  (format (current-error-port) "--workload must be steady, promote, burst or varied~%")
  (exit 2))
(define promote-share (opt-int 'promote-share 0.25))
(define burst-every (opt-int 'burst-every 50))
(define burst-fraction (opt-int 'burst-fraction 0.5))
(define seed (opt-int 'seed 42))
(define sync? (not (opt 'no-sync #f)))
(define iters (opt-int 'iters 250))
(define layers (opt-int 'layers 4))
(define d (opt-int 'd 128))
(define batch (opt-int 'batch 512))
(define host-heap-mib (opt-int 'host-heap-mib 0))
(define hard-limit (opt 'hard-limit "16MiB"))
(define soft-limit (opt 'soft-limit #f))
(define collector (string->symbol (opt 'collector "callbacks")))
(define incremental? (opt 'incremental #f))
(define trace-file (opt 'trace #f))
(define json? (opt 'json #f))
(define quiet? (opt 'quiet #f))

(define (now) (exact->inexact (/ (get-internal-real-time) internal-time-units-per-second)))
(define (mib n) (/ n 1048576.0))

(define heap (make-device-heap #:backend backend #:hard-limit hard-limit #:soft-limit soft-limit
                               #:policy policy #:collector collector #:incremental? incremental?))

;;; The simulated runtime: a live host heap of small linked objects that every
;;; (whole-heap) collection has to mark, and some host garbage per iteration.
(define host-heap
  (let loop ((n (quotient (* host-heap-mib 1048576) 96)) (acc '()))
    (if (zero? n) acc (loop (- n 1) (cons (make-vector 8 n) acc)))))
(define (host-churn i)
  (let loop ((k 0) (acc '()))
    (if (= k 300) (length acc) (loop (+ k 1) (cons (vector i k) acc)))))

;;; The model: W (d x d) and b (d) per layer, the input x (d x batch).
(define (dense-params seed)
  (let ((w (device-array heap (* d d)))
        (b (device-array heap d)))
    (device-array-fill-random! w seed (/ 1.7 (sqrt d)))
    (device-array-fill-random! b (+ seed 1000) 0.1)
    (cons w b)))
(define params (map dense-params (iota layers 1)))
(define input (device-array heap (* d batch)))
(device-array-fill-random! input 7 1.0)

;;; The oracle (explicit_free: no collection ever runs) frees each array
;;; itself the moment it dies; a workload may keep one past that (kept).
(define explicit-free? (string=? policy "explicit_free"))
(define kept (make-hash-table))  ; array -> the iteration at whose start it dies
(define explicit-frees 0)
(define inflight '())            ; oracle: this iteration's arrays (an OOM must not leak them)
(define (died! a)
  (when (and explicit-free? a (device-array-live? a) (not (hashq-ref kept a)))
    (device-array-free! a)
    (set! explicit-frees (+ explicit-frees 1))))
(define (new-array floats)
  (let ((a (device-array heap floats)))
    (when explicit-free? (set! inflight (cons a inflight)))
    a))

;;; The workloads (the header's definitions).
(define rng (seed->random-state seed))
(define hard-limit-bytes (json-ref (heap-stats-alist heap) "hard_limit"))
(define chunk-cap (max 4096 (min (* 256 1048576) (quotient hard-limit-bytes 16))))
(define (begin-iteration! it)
  (when (string=? workload "promote")
    (for-each (lambda (a) (hashq-remove! kept a) (died! a))
              (hash-fold (lambda (a expiry acc) (if (<= expiry it) (cons a acc) acc)) '() kept))))
(define (written! a) (device-array-fill! a 0.0) a)
(define (after-layer! it t y)
  (cond
   ((string=? workload "promote")
    (for-each (lambda (a)
                (when (< (random 1.0 rng) promote-share)
                  (hashq-set! kept a (+ it 1 (random 50 rng)))))
              (list t y)))
   ((string=? workload "varied")
    (let* ((lo (log 4096.0)) (hi (log (exact->inexact chunk-cap)))
           (bytes (logand (inexact->exact (floor (exp (+ lo (* (- hi lo) (random 1.0 rng)))))) -4)))
      (died! (written! (new-array (max 1 (quotient bytes 4)))))))))
(define (end-iteration! it)
  (let ((total (inexact->exact (floor (* burst-fraction hard-limit-bytes)))))
    (when (and (string=? workload "burst") (zero? (modulo (+ it 1) burst-every)) (> total 0))
      (let loop ((got 0) (held '()))
        (if (< got total)
            (loop (+ got chunk-cap)
                  (cons (written! (new-array (max 1 (quotient (min chunk-cap (- total got)) 4)))) held))
            (for-each died! held))))))

;;; One Dense layer: relu.(W*x .+ b). Both arrays it allocates are dropped by
;;; the caller (the product at once, the result after the next layer).
(define (dense it layer x)
  (let ((wx (new-array (* d batch)))
        (y (new-array (* d batch))))
    (gemm! wx (car layer) x d d batch)
    (bias-relu! y wx (cdr layer) d batch)
    (after-layer! it wx y)
    (died! wx)
    y))

(define (forward it x)
  (let loop ((ls params) (x x))
    (if (null? ls)
        x
        (let ((y (dense it (car ls) x)))
          (unless (eq? x input) (died! x))
          (loop (cdr ls) y)))))

(define (stats) (heap-stats-alist heap))
(define (blocking-full s) (json-ref s "gc" "by_kind" "blocking_full"))
;;; Blocking whole-heap collections of any origin: the policy's blocking fulls
;;; and back-to-back cycles, and Guile's own collections (whole-heap and
;;; stop-the-world: Guile runs bdwgc non-incrementally).
(define (blocking-any s)
  (+ (blocking-full s) (or (json-ref s "gc" "blocking_cycles") 0)
     (or (json-ref s "gc" "runtime_full_collections") 0)))
(define (collections s)
  (+ (json-ref s "gc" "by_kind" "minor") (json-ref s "gc" "by_kind" "incremental_full")
     (json-ref s "gc" "by_kind" "blocking_full")))

(define trace-port
  (and trace-file
       (let ((p (open-output-file trace-file)))
         (display "iteration,live,reserved,collections,gc_seconds\n" p)
         p)))

(define ooms-seen 0)
(define first-oom #f)  ; the iteration of the first OOM
(define steady-from (quotient (+ iters 9) 10))  ; after the first 10% of iterations
(define full-before-steady 0)
(define any-before-steady 0)
(define checksum 0.0)
(define t0 (now))

(let loop ((i 0))
  (when (< i iters)
    (when (= i steady-from)
      (let ((st (stats)))
        (set! full-before-steady (blocking-full st))
        (set! any-before-steady (blocking-any st))))
    (catch 'gcpressure-error
      (lambda ()
        (begin-iteration! i)
        (let ((y (forward i input)))
          (host-churn i)
          (when (= i (- iters 1)) (set! checksum (device-array-sum y)))
          (died! y)
          (end-iteration! i)))
      (lambda (key who status msg)
        (if (eq? status 'oom)
            (begin
              (set! ooms-seen (+ ooms-seen 1))
              (unless first-oom (set! first-oom i))
              (unless quiet? (format (current-error-port) "iteration ~a: OOM: ~a~%" i msg)))
            (throw key who status msg))))
    (for-each died! inflight)  ; the oracle: what an OOM left behind
    (set! inflight '())
    (heap-iteration! heap)
    (when sync? (heap-synchronize! heap))
    (when (or trace-port (not quiet?))
      (let ((s (stats)))
        (when trace-port
          (format trace-port "~a,~a,~a,~a,~a~%" i (json-ref s "requested" "current")
                  (json-ref s "reserved" "current") (collections s) (json-ref s "gc" "gc_seconds")))
        (unless quiet?
          (format #t "iteration ~4d  live ~8,2f MiB  reserved ~8,2f MiB  collections ~a~%" i
                  (mib (json-ref s "requested" "current")) (mib (json-ref s "reserved" "current"))
                  (collections s)))))
    (loop (+ i 1))))

(define wall (- (now) t0))
(when trace-port (close-port trace-port))

(define s (stats))
(define counters (gcpressure-module-counters))
(define own (guile-own-collections))
(define (num x) (if (exact? x) x (let ((r (exact->inexact x))) (if (nan? r) 0 r))))
(define summary
  `(("policy" . ,(json-ref s "gc" "policy"))
    ("backend" . ,(json-ref s "backend"))
    ("iterations" . ,iters)
    ("ooms" . ,(json-ref s "ooms"))
    ("peak_live_bytes" . ,(json-ref s "requested" "peak"))
    ("peak_reserved_bytes" . ,(json-ref s "reserved" "peak"))
    ("collections_minor" . ,(json-ref s "gc" "by_kind" "minor"))
    ("collections_full" . ,(+ (json-ref s "gc" "by_kind" "incremental_full")
                              (json-ref s "gc" "by_kind" "blocking_full")))
    ;; As the C++ loop: blocking whole-heap collections of any origin after the first 10%.
    ("collections_full_steady" . ,(- (blocking-any s) any-before-steady))
    ("collections_full_steady_any" . ,(- (blocking-any s) any-before-steady))
    ("collections_full_steady_policy" . ,(- (blocking-full s) full-before-steady))
    ("max_pause_seconds" . ,(json-ref s "gc" "longest_pause_seconds"))
    ("gc_seconds" . ,(json-ref s "gc" "gc_seconds"))
    ("wall_seconds" . ,wall)
    ("time_per_iter" . ,(/ wall iters))
    ("finalized" . ,(json-ref s "gc" "finalized"))
    ("workload" . ,workload)
    ("explicit_frees" . ,explicit-frees)
    ;; Every collection, whoever started it (the library's view).
    ("collections_runtime" . ,(or (json-ref s "gc" "runtime_collections") 'null))
    ("exposed_gc_seconds" . ,(or (json-ref s "gc" "exposed_gc_seconds") 'null))
    ("gc_seconds_all" . ,(or (json-ref s "gc" "gc_seconds_all") 'null))
    ;; Guile's own since the module loaded (Note [Counting Guile's own collections]).
    ("guile_own_collections" . ,(car own))
    ("guile_own_seconds" . ,(caddr own))
    ("synchronize" . ,sync?)
    ;; Our own: the runtime and the test's inputs.
    ("runtime" . "guile")
    ("collector" . ,(symbol->string collector))
    ("bdwgc_incremental" . ,(assq-ref counters 'gc-incremental))
    ("hard_limit_bytes" . ,(json-ref s "hard_limit"))
    ("total_allocated_bytes" . ,(json-ref s "requested" "total"))
    ("ooms_caught" . ,ooms-seen)
    ("first_oom_iteration" . ,(or first-oom 'null))
    ("finalized_on_guile_finalizer_thread" . ,(assq-ref counters 'finalized-on-other-threads))
    ("bdwgc_collections" . ,(bdwgc-collections))
    ("ladder_full_collections" . ,(json-ref s "ladder" "full_collection"))
    ("layers" . ,layers) ("d" . ,d) ("batch" . ,batch) ("host_heap_mib" . ,host-heap-mib)
    ("checksum" . ,(num checksum))
    ;; Which figures are bounds, and why (the C++ loop's "bounds" object).
    ("bounds" . (raw . "{\"collections_runtime\":\"exact (bdwgc's GC_get_gc_no less the policy's)\",\"runtime_full_collections\":\"exact while bdwgc is not incremental (Guile's mode): every collection is whole-heap\",\"runtime_gc_seconds\":\"bdwgc's millisecond total of stop-the-world collections: ms steps\",\"collections_full_steady\":\"exact: Guile's own collections are stop-the-world and whole-heap\"}"))))

(define (json-value v)
  (cond ((eq? v 'null) "null")
        ((and (pair? v) (eq? (car v) 'raw)) (cdr v))
        ((string? v) (format #f "~s" v))
        ((eq? v #t) "true")
        ((eq? v #f) "false")
        (else (number->string (num v)))))

(unless json?
  (format #t "~%~a on ~a, ~a iterations, hard limit ~,1f MiB: peak reserved ~,2f MiB, peak live ~,2f MiB,
  ~a minor + ~a full collections (~a blocking after warm-up), GC ~,3f s of ~,3f s, longest pause ~,2f ms, ~a OOMs~%"
          (assoc-ref summary "policy") (assoc-ref summary "backend") iters
          (mib (assoc-ref summary "hard_limit_bytes")) (mib (assoc-ref summary "peak_reserved_bytes"))
          (mib (assoc-ref summary "peak_live_bytes")) (assoc-ref summary "collections_minor")
          (assoc-ref summary "collections_full") (assoc-ref summary "collections_full_steady")
          (assoc-ref summary "gc_seconds") wall (* 1000 (assoc-ref summary "max_pause_seconds"))
          (assoc-ref summary "ooms")))
(when json?
  (format #t "{~a}~%"
          (string-join (map (lambda (p) (format #f "~s:~a" (car p) (json-value (cdr p)))) summary) ",")))
