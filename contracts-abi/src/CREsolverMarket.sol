// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * CREsolverMarket — local-chain implementation of the CREsolver market surface
 * (shared/spec/onchain-interface.md). Written for this repository; its behaviour follows the public
 * reference market gilbertsahumada/CREsolve, contracts/src/CREsolverMarket.sol (latest version, the
 * one with ZeroAddress / DuplicateWorker / WorkerSetMismatch / ZeroTotalWeight and Market.resolution).
 *
 * Validation order (first failing check wins; identical to the reference unless marked):
 *
 *   createMarket(question, duration)        (reference)
 *     1. EmptyQuestion()           question is ""
 *     2. ZeroValue()               msg.value == 0 (the reward pool)
 *     3. InvalidDuration()         duration == 0
 *
 *   joinMarket(marketId, agentId)           (reference)
 *     1. MarketNotActive(id)       market missing (deadline == 0), resolved, or past its deadline
 *     2. BelowMinStake(sent, min)  msg.value < minStake
 *     3. AlreadyJoined(id, w)      sender already staked in this market
 *     4. TooManyWorkers(n + 1, 10) the market already has MAX_WORKERS workers
 *     5. NotAgentOwner(w, agent)   !identity.isAuthorizedOrOwner(sender, agentId); an unknown agentId
 *                                  makes the identity registry revert ERC721NonexistentToken(agentId)
 *
 *   requestResolution(marketId)             (reference: permissionless and repeatable)
 *     1. MarketDoesNotExist(id)    deadline == 0
 *     2. MarketAlreadyResolved(id) resolved
 *     No caller or deadline restriction: it may be called any number of times before resolution,
 *     each call emitting ResolutionRequested again (a resolver must de-duplicate).
 *
 *   resolveMarket(marketId, workers, weights, dimScores, resolution)
 *     1. AlreadyResolved(id)                      (reference)
 *     2. MarketNotActive(id)       deadline == 0  (reference: a missing market is "not active" here)
 *     3. TooManyWorkers(len, 10)   workers.length > MAX_WORKERS                        (reference)
 *     4. ArrayMismatch(w, wt, s)   weights.length != workers.length or
 *                                  dimScores.length != 3 * workers.length              (reference)
 *     5. Unauthorized(sender)      !authorizedResolvers[sender]  (note: AFTER the shape checks)
 *     6. WorkerSetMismatch(id, expected, provided)  workers.length != registered count (reference)
 *     7. per worker i, in order:  UnregisteredWorker(id, w) if stakes[id][w] == 0, then
 *                                 DuplicateWorker(id, w) if w equals an earlier entry   (reference)
 *     8. ScoreOutOfRange(id, w, score)  any of the 3*n scores > 100  (ADDED here; the reference
 *                                       accepts any uint8)
 *     9. ZeroTotalWeight(id)       sum(weights) == 0                                  (reference)
 *     The deadline is not checked: a market may be resolved before or after it (reference).
 *   Effects, per worker in the given order: balances[w] += rewardPool * weight / totalWeight + stake;
 *   stake zeroed; reputation sums += the three scores, count += 1; if workerAgentIds != 0, three
 *   reputationRegistry.giveFeedback(agentId, score, 0, tag1, "cresolver", "", "", 0x0) calls with tag1
 *   resolution_quality / source_quality / analysis_depth (a revert there, e.g. "Self-feedback not
 *   allowed", reverts the whole resolution). Then resolved = true, resolution stored, MarketResolved.
 *   Integer-division dust of the reward pool stays in the contract (reference).
 *
 * Deviations from the reference, all deliberate:
 *   - constructor takes minStake (reference: constant 0.0001 ether) — order (identity, reputation, minStake);
 *   - the deployer is authorized as resolver, like the reference, and ResolverUpdated(deployer, true)
 *     is emitted for it (the reference sets it silently);
 *   - ownership and the withdraw() reentrancy lock are implemented inline (same selectors, errors and
 *     event as OpenZeppelin Ownable / ReentrancyGuard, which the reference inherits) so that the
 *     contract can inherit ICREsolverMarket without duplicate declarations;
 *   - `resolved` is written before the external giveFeedback calls (checks-effects-interactions);
 *     the emitted logs are in the same order as the reference;
 *   - score range check (step 8 above);
 *   - getScoringCriteria names are camelCase identifiers (reference: "Resolution Quality", ...).
 */

import {ICREsolverMarket} from "./interfaces/ICREsolverMarket.sol";
import {IIdentityRegistry} from "./interfaces/IIdentityRegistry.sol";
import {IReputationRegistry} from "./interfaces/IReputationRegistry.sol";

contract CREsolverMarket is ICREsolverMarket {
    struct Reputation {
        uint256 resQualitySum;
        uint256 srcQualitySum;
        uint256 analysisDepthSum;
        uint256 count;
    }

    uint256 public constant override MAX_WORKERS = 10;
    uint8 internal constant MAX_SCORE = 100;

    address public immutable override identityRegistry;
    address public immutable override reputationRegistry;
    uint256 public immutable override minStake;

    address public override owner;
    uint256 private _reentrancyStatus = NOT_ENTERED;
    uint256 private constant NOT_ENTERED = 1;
    uint256 private constant ENTERED = 2;

    mapping(uint256 => Market) public override markets;
    uint256 public override marketCount;

    mapping(uint256 => mapping(address => uint256)) public override stakes;
    mapping(uint256 => address[]) internal _marketWorkers;
    mapping(uint256 => mapping(address => uint256)) public override workerAgentIds;

    mapping(address => uint256) public override balances;
    mapping(address => bool) public override authorizedResolvers;
    mapping(address => Reputation) public override reputation;

    modifier onlyOwner() {
        if (msg.sender != owner) revert OwnableUnauthorizedAccount(msg.sender);
        _;
    }

    modifier nonReentrant() {
        if (_reentrancyStatus == ENTERED) revert ReentrancyGuardReentrantCall();
        _reentrancyStatus = ENTERED;
        _;
        _reentrancyStatus = NOT_ENTERED;
    }

    constructor(address identityRegistry_, address reputationRegistry_, uint256 minStake_) {
        if (identityRegistry_ == address(0) || reputationRegistry_ == address(0)) revert ZeroAddress();
        identityRegistry = identityRegistry_;
        reputationRegistry = reputationRegistry_;
        minStake = minStake_;
        _transferOwnership(msg.sender);
        authorizedResolvers[msg.sender] = true;
        emit ResolverUpdated(msg.sender, true);
    }

    // ─── Markets ─────────────────────────────────────────────────────────

    function createMarket(string calldata question, uint256 duration)
        external
        payable
        override
        returns (uint256 marketId)
    {
        if (bytes(question).length == 0) revert EmptyQuestion();
        if (msg.value == 0) revert ZeroValue();
        if (duration == 0) revert InvalidDuration();

        marketId = marketCount++;
        uint256 deadline = block.timestamp + duration;
        markets[marketId] = Market({
            question: question,
            rewardPool: msg.value,
            deadline: deadline,
            creator: msg.sender,
            resolved: false,
            resolution: false
        });
        emit MarketCreated(marketId, msg.sender, question, msg.value, deadline);
    }

    function joinMarket(uint256 marketId, uint256 agentId) external payable override {
        if (!isMarketActive(marketId)) revert MarketNotActive(marketId);
        if (msg.value < minStake) revert BelowMinStake(msg.value, minStake);
        if (stakes[marketId][msg.sender] > 0) revert AlreadyJoined(marketId, msg.sender);
        uint256 workerCount = _marketWorkers[marketId].length;
        if (workerCount >= MAX_WORKERS) revert TooManyWorkers(workerCount + 1, MAX_WORKERS);
        if (!IIdentityRegistry(identityRegistry).isAuthorizedOrOwner(msg.sender, agentId)) {
            revert NotAgentOwner(msg.sender, agentId);
        }

        workerAgentIds[marketId][msg.sender] = agentId;
        stakes[marketId][msg.sender] = msg.value;
        _marketWorkers[marketId].push(msg.sender);
        emit WorkerJoined(marketId, msg.sender, msg.value, agentId);
    }

    function requestResolution(uint256 marketId) external override {
        Market storage m = markets[marketId];
        if (m.deadline == 0) revert MarketDoesNotExist(marketId);
        if (m.resolved) revert MarketAlreadyResolved(marketId);
        emit ResolutionRequested(marketId, m.question);
    }

    // ─── Resolution ──────────────────────────────────────────────────────

    function resolveMarket(
        uint256 marketId,
        address[] calldata workers,
        uint256[] calldata weights,
        uint8[] calldata dimScores,
        bool resolution
    ) external override {
        _validateResolution(marketId, workers, weights, dimScores);

        uint256 totalWeight;
        for (uint256 i; i < weights.length; ++i) {
            totalWeight += weights[i];
        }
        if (totalWeight == 0) revert ZeroTotalWeight(marketId);

        Market storage m = markets[marketId];
        m.resolved = true;
        m.resolution = resolution;

        _distributeRewards(marketId, m.rewardPool, workers, weights, totalWeight);
        _updateReputation(marketId, workers, dimScores);

        emit MarketResolved(marketId, msg.sender, resolution);
    }

    function _validateResolution(
        uint256 marketId,
        address[] calldata workers,
        uint256[] calldata weights,
        uint8[] calldata dimScores
    ) internal view {
        Market storage m = markets[marketId];
        if (m.resolved) revert AlreadyResolved(marketId);
        if (m.deadline == 0) revert MarketNotActive(marketId);
        uint256 n = workers.length;
        if (n > MAX_WORKERS) revert TooManyWorkers(n, MAX_WORKERS);
        if (weights.length != n || dimScores.length != n * 3) {
            revert ArrayMismatch(n, weights.length, dimScores.length);
        }
        if (!authorizedResolvers[msg.sender]) revert Unauthorized(msg.sender);
        uint256 expected = _marketWorkers[marketId].length;
        if (n != expected) revert WorkerSetMismatch(marketId, expected, n);

        for (uint256 i; i < n; ++i) {
            address w = workers[i];
            if (stakes[marketId][w] == 0) revert UnregisteredWorker(marketId, w);
            for (uint256 j; j < i; ++j) {
                if (workers[j] == w) revert DuplicateWorker(marketId, w);
            }
        }
        for (uint256 k; k < dimScores.length; ++k) {
            if (dimScores[k] > MAX_SCORE) revert ScoreOutOfRange(marketId, workers[k / 3], dimScores[k]);
        }
    }

    function _distributeRewards(
        uint256 marketId,
        uint256 rewardPool,
        address[] calldata workers,
        uint256[] calldata weights,
        uint256 totalWeight
    ) internal {
        for (uint256 i; i < workers.length; ++i) {
            address w = workers[i];
            uint256 reward = (rewardPool * weights[i]) / totalWeight;
            uint256 stake = stakes[marketId][w];
            stakes[marketId][w] = 0;
            balances[w] += reward + stake;
        }
    }

    function _updateReputation(uint256 marketId, address[] calldata workers, uint8[] calldata dimScores) internal {
        IReputationRegistry registry = IReputationRegistry(reputationRegistry);
        for (uint256 i; i < workers.length; ++i) {
            uint8 resQ = dimScores[i * 3];
            uint8 srcQ = dimScores[i * 3 + 1];
            uint8 depthQ = dimScores[i * 3 + 2];

            Reputation storage rep = reputation[workers[i]];
            rep.resQualitySum += resQ;
            rep.srcQualitySum += srcQ;
            rep.analysisDepthSum += depthQ;
            rep.count += 1;

            uint256 agentId = workerAgentIds[marketId][workers[i]];
            if (agentId == 0) continue;

            registry.giveFeedback(agentId, int128(uint128(resQ)), 0, "resolution_quality", "cresolver", "", "", bytes32(0));
            registry.giveFeedback(agentId, int128(uint128(srcQ)), 0, "source_quality", "cresolver", "", "", bytes32(0));
            registry.giveFeedback(agentId, int128(uint128(depthQ)), 0, "analysis_depth", "cresolver", "", "", bytes32(0));
        }
    }

    // ─── Funds ───────────────────────────────────────────────────────────

    function withdraw() external override nonReentrant {
        uint256 amount = balances[msg.sender];
        if (amount == 0) revert NoBalance();
        balances[msg.sender] = 0;
        (bool ok,) = msg.sender.call{value: amount}("");
        require(ok, "Transfer failed");
        emit Withdrawal(msg.sender, amount);
    }

    // ─── Administration ──────────────────────────────────────────────────

    function setAuthorizedResolver(address resolver, bool authorized) external override onlyOwner {
        authorizedResolvers[resolver] = authorized;
        emit ResolverUpdated(resolver, authorized);
    }

    function transferOwnership(address newOwner) external override onlyOwner {
        if (newOwner == address(0)) revert OwnableInvalidOwner(address(0));
        _transferOwnership(newOwner);
    }

    function renounceOwnership() external override onlyOwner {
        _transferOwnership(address(0));
    }

    function _transferOwnership(address newOwner) internal {
        address previous = owner;
        owner = newOwner;
        emit OwnershipTransferred(previous, newOwner);
    }

    // ─── Views ───────────────────────────────────────────────────────────

    function getMarket(uint256 marketId) external view override returns (Market memory) {
        return markets[marketId];
    }

    function getMarketWorkers(uint256 marketId) external view override returns (address[] memory) {
        return _marketWorkers[marketId];
    }

    function isMarketActive(uint256 marketId) public view override returns (bool) {
        Market storage m = markets[marketId];
        return m.deadline > 0 && !m.resolved && block.timestamp <= m.deadline;
    }

    function getReputation(address worker)
        external
        view
        override
        returns (uint256 resQuality, uint256 srcQuality, uint256 analysisDepth, uint256 count)
    {
        Reputation storage rep = reputation[worker];
        count = rep.count;
        if (count == 0) return (0, 0, 0, 0);
        resQuality = rep.resQualitySum / count;
        srcQuality = rep.srcQualitySum / count;
        analysisDepth = rep.analysisDepthSum / count;
    }

    function getScoringCriteria() external pure override returns (string[8] memory names, uint256[8] memory weights) {
        names = [
            "resolutionQuality",
            "sourceQuality",
            "analysisDepth",
            "reasoningClarity",
            "evidenceStrength",
            "biasAwareness",
            "timeliness",
            "collaboration"
        ];
        weights = [uint256(20), 15, 15, 15, 10, 10, 10, 5];
    }
}
